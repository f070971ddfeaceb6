"""Reliability under faults (docs/reliability.md): env failures leave no invented data,
evaluation survives them, env data that cannot be trained on is named, and resuming does
what it is asked or says why not. Each test injects the fault it is about."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from gymnasium.wrappers.utils import RunningMeanStd

import jaxsac
from jaxsac import checkpoint, compilation, jax_loop, memory
from jaxsac.envs import EnvDataError, EnvFailureError
from jaxsac.replay.state import FAILED, NOT_A_START, RESET, TERMINATED, TRUNCATED
from jaxsac.runners import GymRunner
from tests.conftest import (
    EARLY_FAULT_ENV_ID,
    ENDLESS_ENV_ID,
    ENDLESS_SLOW_ENV_ID,
    FAULTY_ENV_ID,
    LATE_FAULT_ENV_ID,
    NAN_AT_FORTIETH_STEP_ENV_ID,
    NAN_AT_SECOND_STEP_ENV_ID,
    RECURRING_FAULT_ENV_ID,
    FaultyEnv,
)
from tests.support.helpers import TINY, assert_counter_transitions_are_real, buffer_rows
from tests.support.ray_envs import COUNTER_ENV_ID

GAMMA = 0.9


def faulty_config(env_id: str, **changes) -> jaxsac.SACConfig:
    settings = {**TINY, "env_id": env_id, "backend": "gymnasium", "num_envs": 2,
                "learning_starts": 40, "log_every": 60, "total_env_steps": 180,
                "buffer_capacity": 400, "batch_size": 16, "n_step": (1, 3),
                "prioritized": True, "gamma": GAMMA, "host_block_steps": 4}
    return jaxsac.SACConfig(**{**settings, **changes})


def untrained_actor(config: jaxsac.SACConfig):
    """A freshly initialized actor for FaultyEnv's spaces (obs [3], one Box action)."""
    return jaxsac.make_learner(config, 3, 1).init(jax.random.key(0)).actor_params


def logged_steps() -> dict[bytes, tuple]:
    """FaultyEnv.LOG by the observation each logged step started from."""
    return {np.asarray(obs, np.float32).tobytes(): (action, reward, next_obs)
            for obs, action, reward, next_obs in FaultyEnv.LOG}


def test_failed_env_steps_are_never_stored_as_transitions(tmp_path):
    """After a run whose envs fail again and again, every stored row that can start a
    transition is a step an env took (checked against the env's own log), each failure
    ends its episode truncated at the last real step, and every sampled n-step
    transition follows the logged steps."""
    FaultyEnv.LOG.clear()
    config = faulty_config(RECURRING_FAULT_ENV_ID, log_dir=str(tmp_path / "logs"))
    result = jaxsac.train(config, progress=False)
    log = logged_steps()
    buffer = jax.device_get(result.state.buffer)
    num_envs, written = config.num_envs, int(buffer.filled_slots) * config.num_envs
    assert written == config.total_env_steps  # the ring did not wrap
    flags, obs = buffer.flags[:written], buffer.obs[:written]

    failed_rows = np.nonzero(flags & FAILED)[0]
    assert len(failed_rows) >= 4
    assert result.env_restarts == len(failed_rows)
    assert result.metrics["env_restarts"][-1] == result.env_restarts
    for row in failed_rows:
        previous = row - num_envs
        assert flags[row] & TRUNCATED and not flags[row] & TERMINATED
        assert flags[previous] & TRUNCATED  # the episode ends at its last real step
        np.testing.assert_array_equal(obs[row], log[obs[previous].tobytes()][2])

    to_env = jaxsac.connectors.module_actions(FaultyEnv.action_space).to_env
    for row in np.nonzero((flags & NOT_A_START) == 0)[0]:
        action, reward, next_obs = log[obs[row].tobytes()]  # KeyError: invented data
        np.testing.assert_allclose(to_env(buffer.action[row]), action, rtol=1e-6)
        assert buffer.reward[row] == np.float32(reward)
        following = (obs[row + num_envs] if row + num_envs < written
                     else buffer.last_next_obs[row % num_envs])
        np.testing.assert_array_equal(following, next_obs)

    assembly = jaxsac.assembly.host_assembly(config, 3, 1)
    batch = jax.jit(assembly.buffer.sample)(result.state.buffer, jax.random.key(0))
    for b in range(config.batch_size):
        current, total = np.asarray(batch.obs[b]), 0.0
        for i in range(int(batch.n_step[b])):
            _, reward, current = log[current.tobytes()]
            total += GAMMA**i * reward
        np.testing.assert_array_equal(batch.next_obs[b], current)
        np.testing.assert_allclose(batch.reward[b], total, rtol=1e-5)
        np.testing.assert_allclose(batch.discount[b], GAMMA ** int(batch.n_step[b]),
                                   rtol=1e-6)
    with open(tmp_path / "logs" / "metrics.csv") as f:
        header = f.readline().strip().split(",")
    assert "env_restarts" in header and "eval_failures" in header


def test_an_env_failing_right_after_its_reset_ends_no_episode():
    """Every instance raises on its first step: no zero-step episode is reported."""
    with GymRunner(FAULTY_ENV_ID, num_envs=1, max_env_restarts=6,
                   env_kwargs={"fail_at_steps": (1,)}) as runner:
        rows = [runner.unpack(runner.step_packed(np.zeros((1, 1), np.float32)))
                for _ in range(6)]
    steps, episodes = jax.tree.map(lambda *x: np.stack(x), *rows)
    assert steps.failed[:, 0].tolist() == [True, False, True, False, True, False]
    assert not episodes.done.any() and not episodes.episode_length.any()


def test_evaluation_drops_and_counts_failed_episodes_and_the_run_goes_on():
    """Evaluation envs fail on their 3rd step (before the 5-step time limit): every
    evaluation episode is dropped and counted, and training finishes."""
    config = faulty_config(EARLY_FAULT_ENV_ID, max_env_restarts=1)
    result = jaxsac.train(config, progress=False)
    assert result.metrics["env_steps"].tolist() == [60, 120, 180]
    assert result.metrics["eval_failures"].tolist() == [config.eval_episodes] * 3
    assert np.isnan(result.metrics["eval_return"]).all()
    assert result.env_restarts > 0


def test_evaluation_gives_up_on_an_env_that_keeps_failing_without_raising():
    config = faulty_config(FAULTY_ENV_ID, max_env_restarts=0)
    params = untrained_actor(config)
    returns = jaxsac.evaluate(config, params, jax.random.key(1), num_episodes=3)
    assert returns.shape == (3,) and np.isfinite(returns).all()  # FaultyEnv-v0 never fails
    with pytest.raises(EnvFailureError):  # the same env, failing on every first step
        with GymRunner(FAULTY_ENV_ID, 1, max_env_restarts=0,
                       env_kwargs={"fail_at_steps": (1,)}) as runner:
            runner.step_packed(np.zeros((1, 1), np.float32))


@pytest.mark.parametrize("max_env_restarts", [1, 2])
def test_a_failing_constructor_goes_through_the_restart_budget(max_env_restarts):
    """The env fails on its 3rd step, and the rebuild's first construction raises: with
    a budget of 2 the second construction is taken, with 1 the run stops with
    EnvFailureError naming the constructor's error (not a raw RuntimeError)."""
    with GymRunner(FAULTY_ENV_ID, 1, seed=0, max_env_restarts=max_env_restarts,
                   env_kwargs={"fail_at_steps": (3,)}) as runner:
        FaultyEnv.FAILING_CONSTRUCTIONS = 1
        try:
            if max_env_restarts == 1:
                with pytest.raises(EnvFailureError, match=r"gave up after 2 consecutive "
                                   r"failures \(max_env_restarts=1\); last error: "
                                   r"RuntimeError: injected construction failure"):
                    for _ in range(3):
                        runner.step_packed(np.zeros((1, 1), np.float32))
                return
            for _ in range(5):
                runner.step_packed(np.zeros((1, 1), np.float32))
            assert runner.num_env_restarts == 1 and FaultyEnv.FAILING_CONSTRUCTIONS == 0
        finally:
            FaultyEnv.FAILING_CONSTRUCTIONS = 0


def test_bad_env_data_in_training_stops_the_run_after_saving_its_state(tmp_path):
    """Both envs return a NaN observation on their 40th step, in log period 1 (30
    iterations of 2 envs each): the state at the period's start is saved first."""
    config = faulty_config(NAN_AT_FORTIETH_STEP_ENV_ID, checkpoint_dir=str(tmp_path / "c"))
    with pytest.raises(EnvDataError, match=r"non-finite observation .* the state at the start "
                                           r"of log period 1 \(env steps 60\) was saved to"):
        jaxsac.train(config, progress=False)
    assert checkpoint.latest_step(config.checkpoint_dir) == 60


def test_a_raising_callback_stops_the_run_after_saving_the_state_it_was_given(tmp_path):
    config = jaxsac.SACConfig(**TINY, checkpoint_dir=str(tmp_path / "c"))

    def callback(row, state):
        if row["env_steps"] == 400:
            raise KeyError("a bug in the callback")

    with pytest.raises(KeyError, match="a bug in the callback") as error:
        jaxsac.train(config, callback=callback, progress=False)
    assert any("the state it was given (env steps 400) was saved to" in note
               for note in error.value.__notes__)
    assert checkpoint.latest_step(config.checkpoint_dir) == 400


def test_an_evaluation_episode_that_never_ends_is_cut_at_eval_max_episode_steps():
    """An env without a time limit never ends an episode: cut after 7 steps, each
    episode's return is the sum of its rewards 1 + 2 + ... + 7 = 28."""
    config = faulty_config(ENDLESS_ENV_ID, eval_max_episode_steps=7)
    params = untrained_actor(config)
    returns = jaxsac.evaluate(config, params, jax.random.key(1), num_episodes=3)
    np.testing.assert_array_equal(returns, [28.0, 28.0, 28.0])


def test_an_evaluation_past_eval_timeout_s_drops_its_unfinished_episodes():
    """Steps of 50 ms, 10,000 of them per episode, 0.5 s allowed: dropped (NaN, as
    eval_failures count them) with a warning, long before the episodes would end."""
    config = faulty_config(ENDLESS_SLOW_ENV_ID, eval_timeout_s=0.5)
    params = untrained_actor(config)
    start = time.monotonic()
    with pytest.warns(UserWarning, match=r"took longer than eval_timeout_s=0\.5; its 2 "
                                         r"unfinished episode\(s\) are dropped"):
        returns = jaxsac.evaluate(config, params, jax.random.key(1), num_episodes=2)
    assert np.isnan(returns).all() and time.monotonic() - start < 60


def test_bad_data_from_an_evaluation_env_drops_episodes_and_never_raises():
    """An evaluation env returning a NaN observation: its evaluation is dropped (NaN
    returns, counted as eval failures by the loop), with a warning naming it as an
    evaluation env, instead of an EnvDataError that would end the run."""
    config = faulty_config(NAN_AT_SECOND_STEP_ENV_ID)
    params = untrained_actor(config)
    with pytest.warns(UserWarning, match=r"evaluation env \d \('jaxsac_test/NaNAtSecondStep"
                                         r"-v0'\) returned a non-finite observation"):
        returns = jaxsac.evaluate(config, params, jax.random.key(1), num_episodes=3)
    assert returns.shape == (3,) and np.isnan(returns).all()


def test_an_env_that_keeps_failing_stops_the_run_after_saving_its_state(tmp_path):
    """The envs raise on their 70th step (in log period 2, env steps 120..180) and may
    not be rebuilt: the run stops, naming the env, after saving period 2's start."""
    config = faulty_config(LATE_FAULT_ENV_ID, max_env_restarts=0,
                           checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(EnvFailureError, match=r"env 0 .* gave up after 1 consecutive failure.*"
                                              r"log period 2 \(env steps 120\) was saved"):
        jaxsac.train(config, progress=False)
    assert checkpoint.latest_step(config.checkpoint_dir) == 120


@pytest.mark.parametrize("kwargs, message", [
    ({"nan_obs_at_steps": (3,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned a non-finite "
                                 r"observation \[3\.0, 3\.0, nan\] from step at its env step 3"),
    ({"inf_reward_at_steps": (2,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned the "
                                    r"non-finite reward inf at its env step 2"),
    ({"bad_shape_at_steps": (4,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned an "
                                   r"observation of shape \(4,\) from step; its "
                                   r"observation_space has shape \(3,\) at its env step 4"),
    # Finite as float64 but inf in the float32 the buffer stores: checked after the cast.
    ({"huge_obs_at_steps": (2,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned an "
                                  r"observation that is not finite as float32 \[2\.0, 2\.0, "
                                  r"1e\+39\] from step at its env step 2"),
    ({"huge_reward_at_steps": (3,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned the "
                                     r"reward 1e\+39, not finite as float32, at its env step 3"),
    ({"vector_reward_at_steps": (2,)}, r"env \d \('jaxsac_test/Faulty-v0'\) returned a "
                                       r"reward of shape \(2,\); a reward is one number, at "
                                       r"its env step 2"),
])
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_env_data_that_cannot_be_trained_on_is_named(kwargs, message, vectorization):
    """Both envs return bad data on the given step of their life; the first one named
    stops the runner."""
    with GymRunner(FAULTY_ENV_ID, num_envs=2, seed=10, vectorization=vectorization,
                   env_kwargs={**kwargs, "fail_env_seed": None}) as runner:
        with pytest.raises(EnvDataError, match=message):
            for _ in range(5):
                runner.step_packed(np.zeros((2, 1), np.float32))


# --- resume and checkpoints ---------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A JAX run checkpointed at 600 env steps."""
    directory = tmp_path_factory.mktemp("reliability") / "ckpt"
    config = jaxsac.SACConfig(**TINY, checkpoint_dir=str(directory))
    jaxsac.train(config, progress=False)
    return config, directory


def copy_of(directory, tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(directory, target)
    return target


@pytest.mark.parametrize("changes, message", [
    ({"total_env_steps": 400}, r"is at 600 env steps, beyond total_env_steps=400"),
    ({"total_env_steps": 1_050, "log_every": 350},
     r"is at 600 env steps, which is not a whole number of log periods of log_every=350"),
    ({"normalize_obs": True}, r"normalize_obs: stored False, requested True"),
])
def test_resume_does_what_it_is_asked_or_says_why_not(saved_run, tmp_path, changes, message):
    config, directory = saved_run
    resumed = config.replace(checkpoint_dir=str(copy_of(directory, tmp_path)), resume=True,
                             **changes)
    with pytest.raises(ValueError, match=message):
        jaxsac.train(resumed, progress=False)


def test_resume_stops_at_exactly_total_env_steps(saved_run, tmp_path):
    config, directory = saved_run
    resumed = config.replace(checkpoint_dir=str(copy_of(directory, tmp_path)), resume=True,
                             total_env_steps=1_000)
    result = jaxsac.train(resumed, progress=False)
    assert result.metrics["env_steps"].tolist() == [800, 1_000]
    with pytest.warns(UserWarning, match="is total_env_steps already: nothing to train"):
        again = jaxsac.train(resumed, progress=False)
    assert again.metrics == {} and int(again.state.iteration) == 1_000


def test_an_edited_config_or_env_metadata_is_an_error(saved_run, tmp_path):
    """The action bounds (env metadata) and the config are covered by a checksum."""
    config, directory = saved_run
    for item, edit in (("meta", lambda m: m.update(act_high=[20.0])),
                       ("config", lambda c: c.update(activation="tanh"))):
        target = copy_of(directory, tmp_path / item)
        path = target / "600" / item / "metadata"
        stored = json.loads(path.read_text())
        edit(stored)
        path.write_text(json.dumps(stored))
        with pytest.raises(checkpoint.CorruptCheckpointError,
                           match="changed after the save"):
            jaxsac.load_policy(target)


def test_latest_step_ignores_a_step_folder_without_a_checkpoint(saved_run, tmp_path):
    config, directory = saved_run
    target = copy_of(directory, tmp_path)
    os.makedirs(target / "5000")
    assert checkpoint.latest_step(target) == 600
    state, _ = checkpoint.restore(target)
    assert int(state.iteration) == 600


def test_an_empty_manifest_gives_one_clear_error_and_no_tracebacks(saved_run, tmp_path):
    config, directory = saved_run
    target = copy_of(directory, tmp_path)
    (target / "600" / "learner" / "manifest.ocdbt").write_bytes(b"")
    code = ("import jaxsac\n"
            f"try:\n    jaxsac.checkpoint.restore({str(target)!r})\n"
            "except jaxsac.checkpoint.CorruptCheckpointError as e:\n    print('ERROR', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert "empty file 600/learner/manifest.ocdbt" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_resumed_gymnasium_run_joins_no_transition_across_the_restart(tmp_path):
    """The envs restart on resume: the episodes running at the checkpoint end, truncated,
    at their last stored steps, and the first new rows are NEXT_STEP reset rows from
    there, so no stored transition leads from an old episode into a fresh env."""
    config = jaxsac.SACConfig(
        env_id=COUNTER_ENV_ID, backend="gymnasium", num_envs=2, hidden_sizes=(16, 16),
        batch_size=8, buffer_capacity=1_000, learning_starts=20, log_every=20,
        total_env_steps=60, host_block_steps=4, eval_episodes=1,
        checkpoint_dir=str(tmp_path))
    first = jaxsac.train(config, progress=False)
    last_next_obs = np.asarray(first.state.buffer.last_next_obs)
    result = jaxsac.train(config.replace(total_env_steps=120, resume=True), progress=False)
    rows = buffer_rows(result.state.buffer, num_envs=2)
    flags, obs = rows["flags"], rows["obs"]
    assert_counter_transitions_are_real(rows, NOT_A_START)
    # 30 iterations before the checkpoint; episodes of 7 steps and a reset row, so
    # iteration 29 is the 6th step of an episode.
    np.testing.assert_array_equal(obs[:, 29, 0], [5, 5])
    assert np.all(flags[:, 29] & TRUNCATED) and not np.any(flags[:, 29] & TERMINATED)
    assert np.all(flags[:, 30] & RESET)
    np.testing.assert_array_equal(obs[:, 30], last_next_obs)
    np.testing.assert_array_equal(obs[:, 31, :2], np.zeros((2, 2)))  # the fresh envs
    assert not np.any(flags[:, 31] & NOT_A_START)


def test_observation_statistics_take_in_only_real_observations():
    """A failed row's next_obs repeats the env's last observation: the running
    statistics skip it (checked against gymnasium's RunningMeanStd fed the initial
    observations and every real step's next observation, iteration by iteration)."""
    result = jaxsac.train(faulty_config(RECURRING_FAULT_ENV_ID, normalize_obs=True),
                          progress=False)
    rows = buffer_rows(result.state.buffer, num_envs=2)
    failed = (rows["flags"] & FAILED) != 0
    assert failed.any()
    reference = RunningMeanStd(shape=(3,))
    reference.update(rows["obs"][:, 0].astype(np.float64))
    for t in range(rows["obs"].shape[1]):
        real = rows["next_obs"][~failed[:, t], t].astype(np.float64)
        if len(real):
            reference.update(real)
    stats = result.state.runner
    np.testing.assert_allclose(stats.count, reference.count, rtol=1e-6)
    np.testing.assert_allclose(stats.mean, reference.mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var, reference.var, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend, kept", [("jax", False), ("jax", True), ("gymnasium", False)])
def test_a_state_too_large_for_memory_is_refused_before_anything_is_allocated(
        monkeypatch, tmp_path, backend, kept):
    """1 GiB free against a buffer of 10^8 Pendulum steps: 21 bytes each (obs 3 and
    action 1 float32, reward float32, flags uint8), 1.96 GiB. The run stops at once with
    both figures instead of asking the device for them; `kept`: the compiled-program
    store on (the shapes come from the initial-state program's executable)."""
    monkeypatch.setattr(memory, "_host_bytes_available", lambda: 2**30)
    monkeypatch.setattr(compilation, "_programs_dir", tmp_path if kept else None)
    jax_loop._cached_jax_loop.cache_clear()  # a loop kept from another test is measured
    config = jaxsac.SACConfig(**{**TINY, "buffer_capacity": 100_000_000, "backend": backend})
    with pytest.raises(MemoryError, match=r"train: the run's state needs 1\.96 GiB \(1\.96 GiB "
                                          r"of it the replay buffer of buffer_capacity="
                                          r"100000000 env steps, for 1 seed\(s\)\), more than "
                                          r"the 1\.00 GiB free on cpu .*lower buffer_capacity"):
        jaxsac.train(config, progress=False)
    assert any(tmp_path.iterdir()) == kept  # the kept initial-state program, compiled only


def _kill_a_worker(runner: GymRunner) -> None:
    worker = runner._vec_env.processes[1]
    worker.kill()
    worker.join(timeout=30)


def _killed_run(max_env_restarts: int, kills: int) -> list:
    """(Step, EpisodeInfo) of a 2-env async runner: 3 steps, a worker killed before
    each of the next `kills` steps, then 2 more steps."""
    runner = GymRunner(FAULTY_ENV_ID, num_envs=2, seed=0, vectorization="async",
                       max_env_restarts=max_env_restarts)
    action = np.full((2, 1), 0.5, np.float32)
    try:
        steps = [runner.unpack(runner.step_packed(action)) for _ in range(3)]
        for _ in range(kills):
            _kill_a_worker(runner)
            steps.append(runner.unpack(runner.step_packed(action)))
        steps += [runner.unpack(runner.step_packed(action)) for _ in range(2)]
        return steps, runner.num_env_restarts
    finally:
        with contextlib.suppress(Exception):  # closing a vector env of a dead worker
            runner.close()


def test_a_killed_async_worker_rebuilds_its_envs_as_a_failed_step():
    """The process of one async vector-env worker is killed: its envs are rebuilt in a
    new vector env. That step is a failed row for each env (no env step: obs = next_obs
    = the last good obs, truncated), the next a NEXT_STEP reset row from the last good
    obs to the new envs' first obs, then the envs step on; the same seed gives the same
    rows, and the restarts are counted (2 envs)."""
    (steps, restarts), (again, _) = _killed_run(3, 1), _killed_run(3, 1)
    before, killed, reset, after = steps[2][0], steps[3][0], steps[4][0], steps[5][0]
    assert killed.failed.all() and killed.truncated.all() and not killed.terminated.any()
    np.testing.assert_array_equal(killed.obs, before.next_obs)
    np.testing.assert_array_equal(killed.next_obs, before.next_obs)
    np.testing.assert_array_equal(killed.reward, 0.0)
    assert not reset.failed.any() and not (reset.terminated | reset.truncated).any()
    np.testing.assert_array_equal(reset.obs, before.next_obs)
    np.testing.assert_array_equal(after.obs, reset.next_obs)
    assert not np.array_equal(reset.next_obs, before.next_obs)
    assert not after.failed.any() and restarts == 2
    for (step, info), (step2, info2) in zip(steps, again, strict=True):
        for x, y in zip(jax.tree.leaves((step, info)), jax.tree.leaves((step2, info2)),
                        strict=True):
            np.testing.assert_array_equal(x, y)


def test_async_workers_dying_past_the_restart_budget_are_a_named_env_failure():
    """More deaths in a row than max_env_restarts: an EnvFailureError naming the
    runner's envs and the worker's death, which train saves the state for, not a raw
    EOFError."""
    with pytest.raises(EnvFailureError, match=r"envs 0\.\.1 \('jaxsac_test/Faulty-v0'\): a "
                                              r"worker process of the async vector env died "
                                              r".* 2 times in a row, more than "
                                              r"max_env_restarts=1"):
        _killed_run(1, 2)
