"""The schedule, the JAX loop, `make_train` and `train`: metrics, determinism, sweeps,
callbacks, both backends, and resuming a checkpoint of the previous format."""

from __future__ import annotations

import logging
import os
import re
import shutil
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxsac
from jaxsac.assembly import assemble, init_state
from jaxsac.jax_loop import make_train
from jaxsac.learner import Hyperparams
from jaxsac.schedule import (
    Phase,
    Schedule,
    gradient_schedule,
    iterations_per_period,
    phase_of,
    segments,
    warmup_iterations,
)
from jaxsac.train import train
from tests.support.helpers import TINY, gymnasium_cartpole_lengths, leaves_equal


@pytest.mark.parametrize(("learning_starts", "num_envs"), [(0, 1), (1, 1), (100, 1), (100, 8),
                                                           (256, 3), (1000, 4)])
def test_segments_cover_every_iteration_with_its_phase(learning_starts, num_envs):
    config = Schedule.of(jaxsac.SACConfig(
        learning_starts=learning_starts, num_envs=num_envs, log_every=24 * num_envs,
        total_env_steps=2_400 * num_envs, buffer_capacity=1200 * num_envs))
    per = iterations_per_period(config)
    for period in range(10):
        expanded = [phase for phase, n in segments(config, period * per, (period + 1) * per)
                    for _ in range(n)]
        assert expanded == [phase_of(config, i) for i in range(period * per, (period + 1) * per)]
    # Brute force of docs/semantics.md: random actions while fewer than learning_starts
    # env steps were taken; gradient steps once learning_starts steps are stored.
    for i in range(300):
        random_actions = i * num_envs < learning_starts
        updates = (i + 1) * num_envs >= learning_starts
        expected = (Phase.LEARN if not random_actions else
                    Phase.FIRST_UPDATE if updates else Phase.WARMUP)
        assert phase_of(config, i) is expected
    assert warmup_iterations(config) == -(-learning_starts // num_envs)


@pytest.mark.parametrize(("utd", "num_envs", "expected"),
                         [(1.0, 1, (1, 1)), (1.0, 8, (8, 1)), (0.5, 4, (2, 1)),
                          (0.25, 1, (1, 4)), (2.0, 3, (6, 1)), (0.1, 2, (1, 5))])
def test_gradient_schedule(utd, num_envs, expected):
    config = jaxsac.SACConfig(utd_ratio=utd, num_envs=num_envs, buffer_capacity=1000 * num_envs)
    assert gradient_schedule(Schedule.of(config)) == expected


def test_make_train_vmaps_over_seeds_with_metrics_per_period():
    config = jaxsac.SACConfig(**TINY)
    train_fn = make_train(config)
    states, metrics = jax.jit(jax.vmap(train_fn))(jax.random.split(jax.random.key(0), 2))
    assert metrics["eval_return"].shape == (2, 3)
    np.testing.assert_array_equal(metrics["env_steps"], [[200, 400, 600]] * 2)
    # Iteration 99 is the first with gradient steps (100 steps stored), one per iteration.
    np.testing.assert_array_equal(metrics["grad_steps"], [[101, 301, 501]] * 2)
    np.testing.assert_array_equal(states.learner.step, [501, 501])
    assert not np.allclose(states.learner.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"][0],
                           states.learner.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"][1])
    # Pendulum episodes last 200 steps and each is followed by its NEXT_STEP reset row:
    # episodes end at iterations 199 and 400 (the third would end at 601). Returns lie
    # in [-16.3·200, 0].
    np.testing.assert_array_equal(metrics["num_episodes"], [[1, 1, 2]] * 2)
    assert np.all(metrics["episode_return_mean"][:, -1] <= 0)
    assert np.all(metrics["episode_return_mean"][:, -1] >= -16.3 * 200)
    assert np.all(np.isfinite(metrics["qf_loss"]))


def test_same_config_and_key_give_the_same_bits():
    config = jaxsac.SACConfig(**TINY)
    run = jax.jit(make_train(config))
    first, second = run(jax.random.key(3)), run(jax.random.key(3))
    assert leaves_equal(first, second)
    other = run(jax.random.key(4))
    assert not leaves_equal(first[0].learner.actor_params, other[0].learner.actor_params)


@pytest.mark.parametrize("impl", ["philox4x32", "threefry2x32"])
def test_the_run_starts_from_its_configured_generator_whatever_the_key(impl):
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 200, "prng_impl": impl})
    assembly = assemble(config)
    start = jax.jit(lambda key: init_state(assembly, key, Hyperparams.from_config(config)))
    typed, raw = start(jax.random.key(5)), start(jax.random.PRNGKey(5))
    assert str(jax.random.key_impl(typed.key)) == impl
    assert leaves_equal(typed, raw)  # a raw uint32 key and its typed twin start one run
    # The run key holds the first two words the given key draws (jax.random.bits);
    # init_state splits it into the learner's, the runner's and the state's run key.
    words = np.asarray(jax.random.bits(jax.random.key(5), (2,), jnp.uint32))
    first_split = jax.random.split(jax.random.wrap_key_data(words, impl=impl), 3)
    np.testing.assert_array_equal(jax.random.key_data(typed.key),
                                  jax.random.key_data(first_split[2]))


def test_a_whole_run_draws_from_philox_when_configured():
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 200, "prng_impl": "philox4x32"})
    state, metrics = jax.jit(make_train(config))(jax.random.key(5))
    assert str(jax.random.key_impl(state.key)) == "philox4x32"
    assert np.all(np.isfinite(metrics["qf_loss"])) and np.all(np.isfinite(metrics["eval_return"]))


@pytest.mark.parametrize("learning_starts", [100, 500])  # warm-up of 1 and of 3 periods
def test_train_period_by_period_is_reproducible_and_matches_make_train(learning_starts):
    config = jaxsac.SACConfig(**{**TINY, "learning_starts": learning_starts,
                                 "total_env_steps": 1_000})
    chunked = train(config, progress=False)
    again = train(config, progress=False)
    assert leaves_equal(chunked.state, again.state)
    state, metrics = jax.jit(make_train(config))(jax.random.key(config.seed))
    assert leaves_equal(chunked.state, state)
    assert leaves_equal(chunked.metrics, metrics)


def test_jitted_program_is_traced_once_per_call(monkeypatch):
    import jaxsac.jax_loop as loop

    calls = []
    original = loop.training_step
    monkeypatch.setattr(loop, "training_step",
                        lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 1_000})
    jax.jit(make_train(config))(jax.random.key(0))
    # One scan body for every iteration of every period, warm-up included.
    assert len(calls) == 1


def test_learning_rate_sweep_is_one_vmapped_call_equal_to_separate_runs():
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 400})
    lrs = jnp.array([1e-4, 3e-4, 1e-3])
    sweep_fn = make_train(config, sweep=("critic_lr",))
    keys = jnp.stack([jax.random.key(0)] * 3)
    states, _ = jax.jit(jax.vmap(sweep_fn))(keys, lrs)
    for i, lr in enumerate([1e-4, 3e-4, 1e-3]):
        single, _ = jax.jit(make_train(config, sweep=("critic_lr",)))(jax.random.key(0),
                                                                      jnp.float32(lr))
        jax.tree.map(lambda a, b, i=i: np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-5),
                     states.learner.critic_params, single.learner.critic_params)
    kernels = states.learner.critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"]
    assert not np.allclose(kernels[0], kernels[2])


def test_make_train_rejects_unknown_sweep_fields_and_bad_schedules():
    with pytest.raises(ValueError, match="batch_size"):
        make_train(jaxsac.SACConfig(**TINY), sweep=("batch_size",))
    with pytest.raises(ValueError, match="total_env_steps=650 must be a multiple of log_every"):
        make_train(jaxsac.SACConfig(**{**TINY, "total_env_steps": 650}))
    with pytest.raises(ValueError, match="log_every=200 must be a multiple of num_envs=3"):
        make_train(jaxsac.SACConfig(**{**TINY, "num_envs": 3, "buffer_capacity": 3000}))


def test_gymnasium_backend_trains_with_the_same_schedule(tmp_path):
    config = jaxsac.SACConfig(**{**TINY, "backend": "gymnasium", "log_dir": str(tmp_path)})
    result = train(config, progress=False)
    np.testing.assert_array_equal(result.metrics["grad_steps"], [101, 301, 501])
    np.testing.assert_array_equal(result.metrics["num_episodes"], [1, 1, 2])
    assert np.all(np.isfinite(result.metrics["eval_return"]))
    for name in ("metrics.csv", "curve.png"):
        assert (tmp_path / name).exists()
    assert list((tmp_path / "tb").iterdir())
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(lines) == 4 and "eval_return" in lines[0]


def test_a_gymnasium_period_of_warm_up_only_logs_nan_learner_metrics_without_warnings():
    """No gradient step in the first period (learning_starts 300 > log_every 200): its
    learner metrics are NaN (as on the JAX backend), without numpy's empty-mean warning."""
    config = jaxsac.SACConfig(**{**TINY, "backend": "gymnasium", "learning_starts": 300,
                                 "total_env_steps": 400})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = train(config, progress=False)
    for name in ("qf_loss", "alpha"):
        assert np.isnan(result.metrics[name][0]) and np.isfinite(result.metrics[name][1])


def test_evaluate_jax_matches_a_gymnasium_rollout():
    """The jitted evaluation of a fixed policy equals the same policy run in gymnasium."""
    import gymnasium

    config = jaxsac.SACConfig(**TINY)
    learner = jaxsac.make_learner(config, 3, 1)
    params = learner.init(jax.random.key(5)).actor_params
    key = jax.random.key(9)
    returns = jaxsac.evaluate(config, params, key, num_episodes=3)
    assert returns.shape == (3,)
    env = gymnasium.make("Pendulum-v1")
    act = jax.jit(lambda o: learner.act(params, o[None], key, deterministic=True)[0])
    for episode in range(3):
        # Start gymnasium from the JAX env's reset state for this episode.
        assembly = assemble(config)
        states, _ = jax.vmap(assembly.env.reset)(jax.random.split(key, 3))
        obs, _ = env.reset(seed=0)
        theta = float(states.env_state.theta[episode])
        theta_dot = float(states.env_state.theta_dot[episode])
        env.unwrapped.state = np.array([theta, theta_dot])
        obs = np.array([np.cos(theta), np.sin(theta), theta_dot], np.float32)
        total, done = 0.0, False
        while not done:
            action = 2.0 * np.asarray(act(jnp.asarray(obs)))
            obs, reward, terminated, truncated, _ = env.step(np.clip(action, -2, 2))
            total += reward
            done = terminated or truncated
        np.testing.assert_allclose(returns[episode], total, rtol=1e-3)


def test_train_with_several_seeds_logs_each_seed(tmp_path):
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 400, "log_dir": str(tmp_path)})
    result = train(config, num_seeds=2, progress=False)
    assert result.metrics["eval_return"].shape == (2, 2)  # [periods, seeds]
    np.testing.assert_array_equal(result.state.learner.step, [301, 301])
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2
    single = train(config.replace(log_dir=None), progress=False)
    assert not np.array_equal(single.metrics["eval_return"], result.metrics["eval_return"][:, 0])


def test_callback_sees_every_row_and_stops_the_run_with_a_checkpoint(tmp_path):
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 1_000, "learning_starts": 300},
                              checkpoint_dir=str(tmp_path / "ckpt"))
    seen = []

    def callback(row, state):
        seen.append((row, int(state.iteration)))
        return row["env_steps"] >= 600

    result = train(config, progress=False, callback=callback)
    # The callback sees each period's row and state at its end; the run stops after
    # period 2 (600 env steps) of 5.
    assert [int(row["env_steps"]) for row, _ in seen] == [200, 400, 600]
    assert [iteration for _, iteration in seen] == [200, 400, 600]
    assert result.metrics["env_steps"].tolist() == [200, 400, 600]
    for i, (row, _) in enumerate(seen):
        assert leaves_equal({k: np.asarray(v) for k, v in row.items()},
                            {k: v[i] for k, v in result.metrics.items()})
    assert jaxsac.checkpoint.latest_step(config.checkpoint_dir) == 600
    # The stopped run is the first 600 env steps of the whole run.
    whole = train(config.replace(checkpoint_dir=None), progress=False)
    assert leaves_equal({k: v[:3] for k, v in whole.metrics.items()}, result.metrics)


def test_period_callback_reports_each_row_from_inside_the_program():
    config = jaxsac.SACConfig(**TINY)
    rows = []
    state, metrics = jax.jit(make_train(config, period_callback=rows.append))(
        jax.random.key(0))
    jax.block_until_ready(state)
    assert [int(row["env_steps"]) for row in rows] == [200, 400, 600]
    for i, row in enumerate(rows):
        assert leaves_equal({k: np.asarray(v) for k, v in row.items()},
                            {k: np.asarray(v[i]) for k, v in metrics.items()})
    with pytest.raises(ValueError, match="make_train: period_callback=3 is invalid"):
        make_train(config, period_callback=3)


def test_a_checkpoint_of_the_previous_layout_restores_and_resumes(tmp_path):
    """tests/data/checkpoint_v1: 2 seeds of the tuned Pendulum-v1 (small nets) after
    1,200 env steps, written by the code before the package was split into layers."""
    directory = tmp_path / "ckpt"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "checkpoint_v1"),
                    directory)
    # Every array's checksum is verified; the config and meta of format 1 have none.
    with pytest.warns(UserWarning, match=r"format-1 checkpoint: its config and env metadata "
                                         r"carry no checksum"):
        state, stored = jaxsac.checkpoint.restore(directory)
    assert int(np.max(state.iteration)) == 1_200 and state.iteration.shape == (2,)
    config = stored.replace(checkpoint_dir=str(directory), resume=True,
                            total_env_steps=1_600)
    result = train(config, num_seeds=2, progress=False)
    assert result.metrics["env_steps"].tolist() == [[1_600, 1_600]]
    assert jaxsac.checkpoint.latest_step(directory) == 1_600
    with pytest.warns(UserWarning, match="format-1 checkpoint"):
        policy = jaxsac.load_policy(directory, step=1_200, seed_index=1)
    assert policy(np.zeros(3, np.float32)).shape == (1,)


COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
EVENTS: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kwargs: EVENTS.append(event))


def compiled_programs(run: Callable[[], Any]) -> list[str]:
    """The names of the programs XLA compiles while `run()` runs (jax_log_compiles)."""
    names: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = re.match(r"Finished XLA compilation of jit\((\w+)\)", record.getMessage())
            if match:
                names.append(match.group(1))

    handler, logger = Collect(), logging.getLogger("jax._src.dispatch")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            run()
    finally:
        logger.removeHandler(handler)
    return names


@struct.dataclass
class AliveState:
    x: jax.Array
    alive: jax.Array  # [] float32: 0 strongly typed after a reset, 1 weakly after a step


class WeakAfterStep:
    """x' = clip(x + a, -1, 1), reward -x'^2; its state's `alive` is a strongly typed
    float32 after a reset and a weakly typed one after a step, as a MuJoCo Playground
    humanoid's reward metrics are."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, key):
        x = jax.random.uniform(key, (1,), jnp.float32, -1.0, 1.0)
        return AliveState(x, jnp.zeros((), jnp.float32)), x

    def step(self, state, action, key):
        x = jnp.clip(state.x + action, -1.0, 1.0)
        return (AliveState(x, jnp.asarray(1.0)), x, -x[0] ** 2, jnp.bool_(False),
                jnp.bool_(False))


def test_a_state_that_comes_back_weakly_typed_does_not_compile_the_period_again(
        monkeypatch):
    """The period program returns the state with the types it took (the env's weakly
    typed leaf made strong, its value unchanged), so every period shares one trace."""
    monkeypatch.setitem(jaxsac.envs.JAX_ENVS, "jaxsac_test/WeakAfterStep-v0", (WeakAfterStep, 7))
    jaxsac.envs.register_jax_env("jaxsac_test/WeakAfterStep-v0", WeakAfterStep,
                                 max_episode_steps=7)  # and gone after the test
    config = jaxsac.SACConfig(env_id="jaxsac_test/WeakAfterStep-v0", **TINY)
    traces = []
    original = jaxsac.jax_loop.run_period
    monkeypatch.setattr(jaxsac.jax_loop, "run_period",
                        lambda *args: traces.append(1) or original(*args))
    result = train(config, progress=False)
    assert len(traces) == 1 and result.metrics["env_steps"].tolist() == [200, 400, 600]
    env_state = result.state.runner.env_state.env_state
    assert not jax.typeof(env_state.env_state.alive).weak_type
    np.testing.assert_array_equal(env_state.env_state.alive, env_state.elapsed_steps > 0)


SMALL_HELPERS = {"convert_element_type", "stage", "_threefry_seed"}
"""Programs of a few operations JAX compiles for any run (dtype casts, key seeding)."""


def test_a_repeated_train_compiles_nothing_and_every_period_shares_one_trace(monkeypatch):
    """train() compiles the initial state, the log period (warm-up periods included)
    and the finiteness check, each once; a second call of the same config reuses every
    compiled program (counted, not timed), and so does a call with another seed and
    length."""
    config = jaxsac.SACConfig(**{**TINY, "total_env_steps": 1_200, "learning_starts": 450,
                                 "eval_episodes": 3})  # warm-up: periods 0-2
    traces = []
    original = jaxsac.jax_loop.run_period
    monkeypatch.setattr(jaxsac.jax_loop, "run_period",
                        lambda *args: traces.append(1) or original(*args))
    jaxsac.jax_loop._cached_jax_loop.cache_clear()  # as in a fresh process
    jax.clear_caches()
    results = []
    names = compiled_programs(lambda: results.append(train(config, progress=False)))
    assert sorted(n for n in names if n not in SMALL_HELPERS) == [
        "_all_finite", "_initial", "_one_period"]
    assert len(traces) == 1  # one trace serves all six periods
    EVENTS.clear()
    second = train(config, progress=False)
    assert EVENTS.count(COMPILE_EVENT) == 0 and EVENTS.count(TRACE_EVENT) == 0
    assert len(traces) == 1
    assert leaves_equal(results[0].metrics, second.metrics)
    EVENTS.clear()
    other = train(config.replace(seed=7, total_env_steps=1_600), progress=False)
    assert EVENTS.count(COMPILE_EVENT) == 0 and len(traces) == 1
    assert other.metrics["env_steps"].tolist() == list(range(200, 1_601, 200))


@pytest.mark.parametrize("backend", ["jax", "gymnasium"])
def test_a_sampled_evaluation_draws_from_the_policy_and_the_mode_does_not(backend):
    """An actor with every parameter zero is the uniform policy on CartPole-v1's two
    actions: sampled, its returns are those of uniform random play in gymnasium; its mode
    (the argmax, action 0 on a tie) is gymnasium's always-push-left episode."""
    config = jaxsac.tuned("CartPole-v1", backend=backend)
    learner = jaxsac.make_learner(config, 4, gymnasium.spaces.Discrete(2))
    params = jax.tree.map(jnp.zeros_like, learner.init(jax.random.key(0)).actor_params)
    key = jax.random.key(3)
    sampled = jaxsac.evaluate(config.replace(eval_policy="sample"), params, key, 40)
    uniform = gymnasium_cartpole_lengths(lambda rng: int(rng.integers(2)))
    assert abs(sampled.mean() - uniform.mean()) < 3 * uniform.std() / np.sqrt(40), sampled
    assert len(set(sampled.tolist())) > 5
    mode = jaxsac.evaluate(config, params, key, 40)
    left = gymnasium_cartpole_lengths(lambda rng: 0)
    assert set(mode.tolist()) <= set(left.tolist()) and mode.max() <= left.max()
