"""Data shards and their placement on a device mesh (jaxsac.sharding).

The multi-device runs happen in fresh processes (tests/support/sharding_child.py and
tests/support/checkpoint_child.py) started with 4 forced CPU devices: XLA_FLAGS must be set
before jax starts, and this process already runs on one device. Each of them checks a
4-device run against the same run on one device with the same data shards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint, distributed
from jaxsac.replay import ReplayBuffer, episode_buffer, scheduled_beta, sharded_buffer
from jaxsac.types import Step
from tests.support import helpers

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
ROOT = TESTS.parent
DEVICES = 4
TINY = {**helpers.TINY, "total_env_steps": 400, "num_envs": 4, "data_shards": DEVICES}
TOLERANCE = 1e-5
"""Largest parameter difference allowed between 4 devices and 1 (float32 rounding of
differently ordered gradient sums, over a few hundred gradient steps)."""


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jax_cache")


def child_env(cache: Path, devices: int) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def run_child(cache: Path, devices: int, script: str, *args: str):
    proc = subprocess.run([sys.executable, str(SUPPORT / script), *args],
                          env=child_env(cache, devices), cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_spread_over_devices(shardings: dict, spec: list) -> None:
    """Buffer and env arrays split over the 4 devices; learner arrays replicated."""
    for name in ("buffer.obs", "buffer.write_slot", "runner.obs", "runner.env_state"):
        info = shardings[name]
        assert info["spec"] == spec and not info["replicated"], (name, info)
        assert len(info["shard_shapes"]) == DEVICES
    for name in ("learner.actor", "learner.critic_opt_state", "runner.obs_norm"):
        assert shardings[name]["replicated"], (name, shardings[name])


def test_four_devices_train_the_parameters_of_one_device_with_vmapped_seeds(jax_cache):
    """Two seeds vmapped, prioritized replay with random n-step: the sharded priorities,
    the n-step sampling and the seed axis all meet the mesh in one run."""
    config = jaxsac.SACConfig(**TINY, prioritized=True, priority_alpha=0.8,
                              priority_beta=0.4, n_step=(1, 3))
    out = run_child(jax_cache, DEVICES, "sharding_child.py", "make_train", config.to_json(), "2")
    assert out["devices"] == DEVICES
    steps_4, steps_1 = out["grad_steps"]
    assert steps_4 == steps_1 == [[104, 304]] * 2  # 4 gradient steps per iteration of 4 envs
    assert out["max_param_change"] > 100 * TOLERANCE  # the runs did learn something
    assert out["max_param_difference"] < TOLERANCE
    # Seed axis first (unsharded), then the shard axis (buffer) or env axis (runner):
    # each device holds one of the 4 shards, of every seed.
    assert_spread_over_devices(out["shardings"], [None, "data"])
    assert out["shardings"]["buffer.obs"]["shard_shapes"] == [[2, 1, 500, 3]] * DEVICES
    assert out["single_device_shardings"]["buffer.obs"]["shard_shapes"] == [[2, 4, 500, 3]]
    defaulted, too_few, philox = out["errors"]
    assert "num_envs=2" in defaulted and "data_shards defaults to 4" in defaulted
    assert "data_shards=2" in too_few and "multiple of 4" in too_few
    assert "prng_impl='philox4x32'" in philox and "mesh of 4 devices" in philox
    assert out["default_mesh_devices"] == [DEVICES, 1, 1]


def four_device_run(tmp_path: Path, jax_cache: Path):
    """A 600-step run on 4 devices in one process, checkpoints every 200 steps."""
    (tmp_path / "four").mkdir()
    directory = tmp_path / "four" / "checkpoints"
    config = jaxsac.SACConfig(**{**TINY, "data_shards": None, "total_env_steps": 600},
                              checkpoint_dir=str(directory), checkpoint_every=200,
                              max_to_keep=5)
    [out] = run_child(jax_cache, DEVICES, "checkpoint_child.py", "train", config.to_json())
    assert out["env_steps"] == [200, 400, 600]
    return config, directory


def learner_leaves(state) -> list:
    learner = state.learner
    return jax.tree.leaves((learner.actor_params, learner.critic_params, learner.log_alpha))


def assert_same_learner(got, expected) -> None:
    for a, b in zip(learner_leaves(got), learner_leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=TOLERANCE)


@pytest.mark.long  # three child processes, each compiling its mesh's programs: 2+ minutes
def test_four_device_checkpoints_restore_on_one_device_and_equal_two_processes_of_two(
        tmp_path, jax_cache):
    """One 4-device run's checkpoints (a child process each: it takes a minute) are
    checked against a resume on one device and against the multi-host launch."""
    config, full = four_device_run(tmp_path, jax_cache)
    check_restore_on_one_device(config, full, tmp_path, jax_cache)
    check_two_processes_of_two_devices(config, full, tmp_path)


def check_restore_on_one_device(config: jaxsac.SACConfig, full: Path, tmp_path: Path,
                                jax_cache: Path) -> None:
    stored, stored_config = checkpoint.restore(full, 400)
    assert stored_config.data_shards == DEVICES  # set from the 4-device mesh
    assert stored.buffer.obs.shape == (DEVICES, 500, 3)  # restored here, on one device

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for step in (200, 400):
        shutil.copytree(full / str(step), resumed / str(step))
    on_one = config.replace(data_shards=DEVICES, checkpoint_dir=str(resumed), resume=True)
    [out] = run_child(jax_cache, 1, "checkpoint_child.py", "train", on_one.to_json())
    assert out["env_steps"] == [600] and out["grad_steps"] == [504]

    expected, _ = checkpoint.restore(full, 600)
    got, _ = checkpoint.restore(resumed, 600)
    assert int(got.iteration) == int(expected.iteration) == 150
    assert_same_learner(got, expected)
    np.testing.assert_allclose(np.asarray(got.buffer.obs), np.asarray(expected.buffer.obs),
                               rtol=0, atol=1e-4)
    before = checkpoint.restore(full, 400)[0].learner.actor_params
    assert not all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(before), jax.tree.leaves(got.learner.actor_params), strict=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def cli_flags(config: jaxsac.SACConfig) -> list[str]:
    """`experiments.train` flags for the fields of `config` that differ from the defaults."""
    default = jaxsac.SACConfig()
    flags = []
    for name, value in config.to_dict().items():
        if value != default.to_dict()[name]:
            values = value if isinstance(value, list) else [value]
            flags += [f"--{name.replace('_', '-')}", *map(str, values)]
    return flags


def check_two_processes_of_two_devices(config: jaxsac.SACConfig, single_process: Path,
                                       tmp_path: Path) -> None:
    """The documented multi-host launch: every process runs the same command with
    JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and its JAX_PROCESS_ID set."""
    directory = tmp_path / "two_processes"
    command = [sys.executable, "-m", "experiments.train", "--no-progress",
               *cli_flags(config.replace(checkpoint_dir=str(directory)))]
    address = f"localhost:{free_port()}"
    procs = []
    for process in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": address,
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(process),
               "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        procs.append(subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-3000:]
            assert "final deterministic evaluation return" in stdout
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    # Every process took part in each save; the steps hold the whole sharded state,
    # with data_shards set from the 4 devices of the two processes.
    assert sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) == [200, 400, 600]
    got, stored_config = checkpoint.restore(directory, 600)
    expected, _ = checkpoint.restore(single_process, 600)
    assert stored_config.data_shards == DEVICES and got.buffer.obs.shape == (DEVICES, 500, 3)
    assert int(got.learner.step) == int(expected.learner.step) == 504
    assert_same_learner(got, expected)


# --- the sharded buffer, on one device ------------------------------------------------


NEXT = jnp.array([0.0, 1.0])
"""The observation after (env, t) is (env, t + 1)."""


def env_steps(num_envs: int, t: int) -> Step:
    """obs = (env, t): every stored row says which env wrote it."""
    envs = jnp.arange(num_envs, dtype=jnp.float32)
    obs = jnp.stack([envs, jnp.full(num_envs, t, jnp.float32)], axis=1)
    no = jnp.zeros(num_envs, bool)
    return Step(obs, jnp.zeros((num_envs, 1)), jnp.ones(num_envs), no, no, obs + NEXT)


def jitted(buffer: ReplayBuffer) -> ReplayBuffer:
    """The buffer's functions jitted (init eagerly: it takes a Step of Python shapes)."""
    return ReplayBuffer(buffer.init, *(jax.jit(f) for f in buffer[1:]))


def filled_buffer(prioritized: bool, num_shards=2, num_envs=4, capacity=64, batch_size=8,
                  alpha=0.7, beta=0.5):
    shard = episode_buffer(capacity // num_shards, num_envs // num_shards,
                           batch_size // num_shards, prioritized=prioritized, alpha=alpha,
                           beta=beta)
    buffer = jitted(sharded_buffer(
        shard, num_shards,
        (lambda s: scheduled_beta(s.priority_updates, beta, None, 0)) if prioritized else None))
    zero = Step(jnp.zeros(2), jnp.zeros(1), jnp.zeros(()), jnp.zeros((), bool),
                jnp.zeros((), bool), jnp.zeros(2))
    state = buffer.init(zero)
    for t in range(10):
        state = buffer.add(state, env_steps(num_envs, t))
    return buffer, state


def test_each_shard_stores_and_samples_only_its_own_envs():
    buffer, state = filled_buffer(prioritized=False)
    assert state.obs.shape == (2, 32, 2) and bool(buffer.can_sample(state))
    for shard, envs in enumerate(([0, 1], [2, 3])):
        assert set(np.asarray(state.obs[shard, :20, 0]).tolist()) == set(envs)
    for seed in range(5):
        batch = buffer.sample(state, jax.random.key(seed))
        env = np.asarray(batch.obs[:, 0])
        assert set(env[:4]) <= {0, 1} and set(env[4:]) <= {2, 3}
        # the n-step successor is the same env's next row
        np.testing.assert_array_equal(batch.next_obs, batch.obs + NEXT)


def test_prioritized_weights_are_normalised_over_all_shards():
    buffer, state = filled_buffer(prioritized=True)
    td = jax.random.uniform(jax.random.key(1), (8,), maxval=5.0)
    for seed in range(4):  # different priorities in the two shards
        batch = buffer.sample(state, jax.random.key(10 + seed))
        state = buffer.update_priorities(state, batch.indices, td * (1 + seed))
    batch = buffer.sample(state, jax.random.key(99))
    # Brute force from the stored leaves: shard s gives half of the batch, so
    # P(t) = p_t^alpha / (2 * sum over shard s); w = (P / min over all valid rows)^-beta.
    leaves = np.asarray(state.priority_sums[0]).reshape(2, -1)[:, :32].astype(np.float64)
    probability = leaves / (2 * leaves.sum(axis=1, keepdims=True))
    smallest = probability[leaves > 0].min()
    shard = np.repeat([0, 1], 4)
    expected = (probability[shard, np.asarray(batch.indices)] / smallest) ** -0.5
    np.testing.assert_allclose(np.asarray(batch.weights), expected, rtol=1e-5)
    assert np.max(expected) <= 1.0 and len(set(np.round(expected, 6))) > 1
    # update_priorities reached the sampled rows of the right shard
    updated = buffer.update_priorities(state, batch.indices, jnp.full(8, 2.0))
    new_leaves = np.asarray(updated.priority_sums[0]).reshape(2, -1)
    np.testing.assert_allclose(new_leaves[shard, np.asarray(batch.indices)],
                               (2.0 + 1e-6) ** 0.7, rtol=1e-6)


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "named"), [
    (dict(num_envs=3, data_shards=2), "num_envs=3"),
    (dict(num_envs=4, batch_size=30, data_shards=4), "batch_size=30"),
    (dict(data_shards=0), "data_shards=0"),
])
def test_config_rejects_shards_that_do_not_divide_envs_and_batch(changes, named):
    with pytest.raises(ValueError, match=named):
        jaxsac.SACConfig(**changes)


def test_the_gymnasium_loop_rejects_several_shards_and_bad_meshes():
    config = jaxsac.SACConfig(env_id="Pendulum-v1", backend="gymnasium", num_envs=2,
                              data_shards=2)
    with pytest.raises(ValueError, match="data_shards=2 .* gymnasium"):
        jaxsac.train(config, progress=False)
    with pytest.raises(ValueError, match="mesh=.*'data' axis"):
        jaxsac.make_train(jaxsac.SACConfig(), mesh="cpu")


# --- multi-host settings --------------------------------------------------------------


def test_explicit_distributed_settings_are_read_and_checked():
    assert distributed.explicit_settings({}) is None
    environ = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4",
               "JAX_PROCESS_ID": "3"}
    assert distributed.explicit_settings(environ) == {
        "coordinator_address": "10.0.0.1:1234", "num_processes": 4, "process_id": 3}
    with pytest.raises(ValueError, match="JAX_PROCESS_ID missing"):
        distributed.explicit_settings({k: v for k, v in environ.items() if k != "JAX_PROCESS_ID"})
    with pytest.raises(ValueError, match="JAX_PROCESS_ID=4 .* below JAX_NUM_PROCESSES=4"):
        distributed.explicit_settings({**environ, "JAX_PROCESS_ID": "4"})
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES='two'"):
        distributed.explicit_settings({**environ, "JAX_NUM_PROCESSES": "two"})


def test_weights_stay_finite_while_a_shard_is_empty():
    shard = episode_buffer(32, 2, 4, prioritized=True, beta=0.0)
    buffer = jitted(sharded_buffer(shard, 2, lambda s: jnp.float32(0.0)))
    state = buffer.init(Step(jnp.zeros(2), jnp.zeros(1), jnp.zeros(()), jnp.zeros((), bool),
                             jnp.zeros((), bool), jnp.zeros(2)))
    one_shard = jax.tree.map(lambda x: x[:1], state)
    one_shard = jax.vmap(shard.add)(one_shard, jax.tree.map(lambda x: x[None],
                                                            env_steps(2, 0)))
    state = jax.tree.map(lambda x, y: x.at[:1].set(y), state, one_shard)
    assert not bool(buffer.can_sample(state))
    weights = np.asarray(buffer.sample(state, jax.random.key(0)).weights)
    np.testing.assert_array_equal(weights, [1, 1, 1, 1, 0, 0, 0, 0])
