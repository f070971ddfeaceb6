"""Tuned example configurations, one readable JSON file per environment id.

    config = jaxsac.tuned("Pendulum-v1", total_env_steps=20_000, seed=3)
    jaxsac.tuned.available()          # the env ids with a tuned example

Each file holds the SACConfig fields that differ from the defaults, plus an `_about`
note saying where the setting comes from and what it should reach, and where that is a
return, `_solved_return`: the bar (`solved_return(env_id)`; the learning curve draws
it). The module itself is callable: `jaxsac.tuned(env_id, **overrides)` is
`jaxsac.tuned.tuned(env_id, **overrides)`.
"""

from __future__ import annotations

import json
import sys
import types
from importlib import resources
from typing import Any

from jaxsac.config import SACConfig


def available() -> list[str]:
    """Environment ids with a tuned configuration (an id with a prefix from its folder:
    "playground/<task>", "dmc/<domain>-<task>-pixels", "ALE/<Game>-v5")."""
    root = resources.files(__name__)
    ids = [f.name for f in root.iterdir() if f.name.endswith(".json")]
    ids += [f"{folder.name}/{f.name}" for folder in root.iterdir() if folder.is_dir()
            for f in folder.iterdir() if f.name.endswith(".json")]
    return sorted(name.removesuffix(".json") for name in ids)


def tuned_values(env_id: str) -> dict[str, Any]:
    """The stored fields of `env_id`'s tuned configuration (without the note)."""
    if env_id not in available():
        raise ValueError(f"tuned: env_id={env_id!r} has no tuned configuration; "
                         f"available: {available()}")
    text = resources.files(__name__).joinpath(*f"{env_id}.json".split("/")).read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def solved_return(env_id: str) -> float | None:
    """The evaluation return `env_id`'s tuned example should reach (its bar; per agent
    for a multi-agent env), or None when it has no tuned example or no such bar."""
    if env_id not in available():
        return None
    text = resources.files(__name__).joinpath(*f"{env_id}.json".split("/")).read_text()
    return json.loads(text).get("_solved_return")


def tuned(env_id: str, **overrides: Any) -> SACConfig:
    """The tuned SACConfig for `env_id`, with `overrides` applied (and validated).

    Args:
        env_id: one of `available()`.
        overrides: SACConfig fields that replace the tuned values.

    Returns:
        The SACConfig. Raises ValueError for an env id without a tuned example (listing
        those that have one) or a bad override (naming it).
    """
    return SACConfig.from_dict({**tuned_values(env_id), **overrides})


class _CallableModule(types.ModuleType):
    def __call__(self, env_id: str, **overrides: Any) -> SACConfig:
        return tuned(env_id, **overrides)


sys.modules[__name__].__class__ = _CallableModule
