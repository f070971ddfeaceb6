"""Checkpoints: exact resume in a new process, load_policy, and failure handling.

Training runs in fresh processes (tests/support/checkpoint_child.py) that share a persistent
compilation cache, so only the first of them compiles the training programs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint, storage
from jaxsac.assembly import assemble, init_state
from jaxsac.checkpoint import CorruptCheckpointError
from jaxsac.learner import Hyperparams
from jaxsac.train import CheckpointSchedule
from tests.support import helpers
from tests.support.helpers import leaves_equal

CHILD = Path(__file__).parent / "support" / "checkpoint_child.py"
ROOT = Path(__file__).resolve().parents[1]
TINY = {**{k: v for k, v in helpers.TINY.items() if k != "total_env_steps"},
        "learning_starts": 200, "checkpoint_every": 200}
TMP_SUFFIX = ".orbax-checkpoint-tmp"


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jax_cache")


def child_env(cache: Path) -> dict[str, str]:
    return {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def run_child(cache: Path, *args: str):
    proc = subprocess.run([sys.executable, str(CHILD), *args], env=child_env(cache), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_steps(source: Path, target: Path, steps: list[int]) -> None:
    target.mkdir(parents=True)
    for step in steps:
        shutil.copytree(source / str(step), target / str(step))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, jax_cache):
    """An uninterrupted 800-step JAX run in its own process, checkpoints every 200 steps."""
    directory = tmp_path_factory.mktemp("full") / "checkpoints"
    config = jaxsac.SACConfig(**TINY, total_env_steps=800, checkpoint_dir=str(directory),
                              max_to_keep=5)
    [out] = run_child(jax_cache, "train", config.to_json())
    assert out["env_steps"] == [200, 400, 600, 800]
    return config, directory


def test_resume_in_a_new_process_is_bit_identical_to_the_uninterrupted_run(
        full_run, tmp_path, jax_cache):
    config, full = full_run
    assert sorted(int(p.name) for p in full.iterdir() if p.name.isdigit()) == [200, 400, 600, 800]
    interrupted = tmp_path / "checkpoints"
    copy_steps(full, interrupted, [200, 400])  # as if the run had stopped after step 400
    resumed = config.replace(checkpoint_dir=str(interrupted), resume=True)
    [out] = run_child(jax_cache, "train", resumed.to_json())
    assert out["env_steps"] == [600, 800]  # only the periods after the checkpoint ran
    assert out["grad_steps"] == [401, 601]
    assert checkpoint.latest_step(interrupted) == 800
    expected, _ = checkpoint.restore(full, 800)
    got, _ = checkpoint.restore(interrupted, 800)
    # Everything: parameters, targets, optimizer states, log α, buffer, env states,
    # episode statistics, key and counters.
    assert leaves_equal(got, expected)
    assert int(got.iteration) == 800 and int(got.buffer.filled_slots) == 800
    before, _ = checkpoint.restore(full, 400)
    assert not leaves_equal(before.learner.actor_params, got.learner.actor_params)


def test_restore_rebuilds_the_state_with_or_without_a_template(full_run):
    config, full = full_run
    state, stored = checkpoint.restore(full)
    assert stored == config
    assert int(state.iteration) == 800 and int(state.learner.step) == 601
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    # Into a template: another step's state, or an abstract one (jax.eval_shape).
    # Fields that do not change the arrays may differ from the stored config.
    other, _ = checkpoint.restore(full, 200)
    requested = config.replace(total_env_steps=5_000, critic_lr=1e-3, log_dir="x", resume=True)
    again, _ = checkpoint.restore(full, like=other, config=requested)
    assert leaves_equal(again, state)
    assembly = assemble(config)
    abstract = jax.eval_shape(lambda k: init_state(assembly, k, Hyperparams.from_config(config)),
                              jax.random.key(0))
    again, _ = checkpoint.restore(full, like=abstract)
    assert leaves_equal(again, state)


def test_several_seeds_keep_their_seed_axis_and_load_policy_picks_one(full_run, tmp_path):
    config, full = full_run
    # A state with a leading seed axis, as from jax.vmap(make_train(config)).
    states = jax.tree.map(lambda *xs: jnp.stack(xs),
                          *(checkpoint.restore(full, step)[0] for step in (200, 400, 800)))
    checkpoint.save(tmp_path, states, config, step=800)
    restored, _ = checkpoint.restore(tmp_path)
    assert leaves_equal(restored, states)
    assert restored.iteration.shape == (3,)
    with pytest.raises(ValueError, match="num_seeds: stored 3, requested no seed axis"):
        checkpoint.restore(tmp_path, like=checkpoint.restore(full)[0])
    policy = jaxsac.load_policy(tmp_path, seed_index=2)
    assert leaves_equal(policy.actor_params,
                        jax.tree.map(lambda x: x[2], states.learner.actor_params))
    with pytest.raises(ValueError, match=r"seed_index=3 is invalid: .* holds 3 seed\(s\)"):
        jaxsac.load_policy(tmp_path, seed_index=3)


def test_load_policy_in_a_fresh_process_matches_evaluate(full_run, jax_cache):
    config, full = full_run
    state, _ = checkpoint.restore(full)
    key = jax.random.key(7)
    # evaluate's gymnasium loop: env i of a vector env reset with seed + i.
    expected = jaxsac.evaluate(config.replace(backend="gymnasium"), state.learner.actor_params,
                               key, num_episodes=3)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    out = run_child(jax_cache, "policy", str(full), str(seed), "3")
    np.testing.assert_allclose(out["returns"], expected, rtol=1e-6)
    assert len(set(np.round(expected, 3))) == 3  # three different episodes
    policy = jaxsac.load_policy(full)
    assert policy.step == 800
    one = policy(np.array([1.0, 0.0, 0.0], np.float32))
    batch = policy(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, -3.0]], np.float32))
    assert one.shape == (1,) and batch.shape == (2, 1)
    np.testing.assert_array_equal(batch[0], one)
    assert np.all(np.abs(batch) <= 2.0)  # Pendulum's torque bounds
    with pytest.raises(ValueError, match=r"obs of shape \(2, 2\); expected \(3,\)"):
        policy(np.zeros((2, 2)))


def gym_config(**changes) -> jaxsac.SACConfig:
    """A gymnasium-backend config; one iteration per jitted block compiles fewer programs
    than blocks of 8, and learning rates are state leaves there, so configs differing only
    in them share compiled programs."""
    return jaxsac.SACConfig(**{**TINY, "learning_starts": 100, "backend": "gymnasium",
                               "normalize_obs": True, "host_block_steps": 1, **changes})


def test_gymnasium_run_resumes_with_the_restored_learner_buffer_and_statistics(
        tmp_path, jax_cache):
    config = gym_config(total_env_steps=200, checkpoint_dir=str(tmp_path))
    # Two runs in one process: 200 steps, then resumed to 400 from its checkpoint.
    first, out = run_child(jax_cache, "train", config.to_json(),
                           config.replace(total_env_steps=400, resume=True).to_json())
    assert first["env_steps"] == [200]
    assert out == {"env_steps": [400], "grad_steps": [301]}  # continued from 101
    saved, _ = checkpoint.restore(tmp_path, 200)
    resumed, _ = checkpoint.restore(tmp_path, 400)
    assert int(resumed.learner.step) == 301
    # The buffer continued: the restored rows are kept, 200 new ones follow them.
    assert int(resumed.buffer.filled_slots) == 400
    for name in ("obs", "action", "reward", "flags"):
        np.testing.assert_array_equal(getattr(resumed.buffer, name)[:200],
                                      getattr(saved.buffer, name)[:200])
    # The observation statistics continued too (runner = the host runner's obs_norm).
    np.testing.assert_allclose(resumed.runner.count, saved.runner.count + 200, rtol=1e-6)
    kernel = lambda s: s.learner.critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"]
    assert not np.allclose(kernel(resumed), kernel(saved))
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(resumed.learner))


def test_sigkill_during_a_save_leaves_the_previous_checkpoint(tmp_path, jax_cache):
    directory = tmp_path / "checkpoints"
    config = jaxsac.SACConfig(**TINY, total_env_steps=100_000, checkpoint_dir=str(directory))
    for _ in range(3):  # a kill can land just after the rename; then resume and try again
        killed_step = kill_during_save(config, directory, jax_cache)
        if not (directory / str(killed_step)).exists():
            break
        config = config.replace(resume=True)
    else:
        pytest.fail("could not kill the child during a save")
    assert (directory / f"{killed_step}{TMP_SUFFIX}").exists()
    previous = checkpoint.latest_step(directory)
    assert previous == killed_step - config.checkpoint_every
    state, _ = checkpoint.restore(directory)
    assert int(state.iteration) == previous
    assert (directory / f"{killed_step}{TMP_SUFFIX}").exists()  # reading changes nothing
    # The next save of this directory clears the unfinished one.
    checkpoint.save(directory, state, config, killed_step)
    assert checkpoint.latest_step(directory) == killed_step
    assert not any(p.name.endswith(TMP_SUFFIX) for p in directory.iterdir())
    assert len([n for n in os.listdir(directory) if n.isdigit()]) <= config.max_to_keep


def kill_during_save(config, directory: Path, cache: Path) -> int:
    """Start a training child, SIGKILL it once a save is in progress after at least one
    complete checkpoint; returns the step whose save was interrupted."""
    proc = subprocess.Popen([sys.executable, str(CHILD), "train", config.to_json()],
                            env=child_env(cache), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"child exited early: {proc.stderr.read()[-2000:]}"
            names = os.listdir(directory) if directory.exists() else []
            complete = [int(n) for n in names if n.isdigit()]
            pending = [n for n in names if n.endswith(TMP_SUFFIX)]
            if complete and pending:
                step = int(pending[0].split(".")[0])
                if step > max(complete):
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    return step
            time.sleep(0.001)
        pytest.fail("no save in progress was seen")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def corrupted_copy(full: Path, target: Path, damage) -> Path:
    shutil.copytree(full, target)
    damage(target / "800")
    return target


def largest_file(folder: Path) -> Path:
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def flip_a_byte(step_dir: Path) -> None:
    path = largest_file(step_dir / "buffer")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(step_dir: Path) -> None:
    path = largest_file(step_dir / "buffer")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize("damage", [flip_a_byte, truncate,
                                    lambda d: shutil.rmtree(d / "learner"),
                                    lambda d: shutil.rmtree(d / "meta")],
                         ids=["flipped-byte", "truncated-file", "missing-learner", "missing-meta"])
def test_a_corrupt_checkpoint_is_an_error_naming_directory_and_step(full_run, tmp_path, damage):
    _, full = full_run
    directory = corrupted_copy(full, tmp_path / "checkpoints", damage)
    pattern = (f"checkpoint step 800 in {directory} is corrupt"
               r".*other steps there: \[200, 400, 600\]")
    with pytest.raises(CorruptCheckpointError, match=pattern):
        checkpoint.restore(directory)
    # The earlier steps are intact and can be chosen explicitly.
    state, _ = checkpoint.restore(directory, 600)
    assert int(state.iteration) == 600


def test_load_policy_reads_no_buffer_and_reports_a_damaged_learner(full_run, tmp_path):
    _, full = full_run
    no_buffer = corrupted_copy(full, tmp_path / "a", lambda d: shutil.rmtree(d / "buffer"))
    assert jaxsac.load_policy(no_buffer).step == 800
    damaged = corrupted_copy(full, tmp_path / "b", lambda d: shutil.rmtree(d / "learner"))
    with pytest.raises(CorruptCheckpointError, match=f"step 800 in {damaged}"):
        jaxsac.load_policy(damaged)


def test_missing_checkpoints_are_errors_naming_directory_and_step(full_run, tmp_path):
    _, full = full_run
    with pytest.raises(FileNotFoundError,
                       match=rf"no checkpoint step 300 in {full}; steps there: \[200, 400, 600, "):
        checkpoint.restore(full, 300)
    with pytest.raises(FileNotFoundError, match=f"no checkpoint in {tmp_path}"):
        jaxsac.load_policy(tmp_path)
    assert checkpoint.latest_step(tmp_path / "nothing") is None
    with pytest.raises(ValueError, match="step=-1 is invalid"):
        checkpoint.restore(full, -1)


def test_a_mismatched_config_lists_every_difference(full_run):
    config, full = full_run
    requested = config.replace(env_id="MountainCarContinuous-v0", hidden_sizes=(64, 64),
                               num_q=3, buffer_capacity=4_000, grad_clip=1.0)
    with pytest.raises(ValueError) as info:
        checkpoint.restore(full, config=requested)
    message = str(info.value)
    assert f"checkpoint step 800 in {full} does not match the requested config" in message
    for line in ("env_id: stored 'Pendulum-v1', requested 'MountainCarContinuous-v0'",
                 "hidden_sizes: stored (32, 32), requested (64, 64)",
                 "num_q: stored 2, requested 3",
                 "buffer_capacity: stored 2000, requested 4000",
                 "grad_clip: stored None, requested 1.0",
                 "obs_shape: stored (3,), requested (2,)"):
        assert line in message
    assert "act_shape" not in message  # both have one action dimension
    # train(resume=True) checks its config the same way.
    state, _ = checkpoint.restore(full)
    with pytest.raises(ValueError, match=r"num_envs: stored 1, requested 2"):
        CheckpointSchedule(config.replace(num_envs=2, resume=True)).resume(state)


def test_buffer_is_optional_and_max_to_keep_is_honoured(full_run, tmp_path):
    config, full = full_run
    state, _ = checkpoint.restore(full)
    light = config.replace(checkpoint_buffer=False, max_to_keep=2)
    for step in (800, 1000, 1200):
        checkpoint.save(tmp_path, state.replace(iteration=state.iteration * 0 + step), light,
                        step)
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [1000, 1200]
    assert not (tmp_path / "1200" / "buffer").exists()
    with pytest.warns(UserWarning, match="saved without its replay buffer"):
        restored, _ = checkpoint.restore(tmp_path)
    assert int(restored.buffer.filled_slots) == 0 and int(restored.iteration) == 1200
    assert leaves_equal(restored.learner, state.learner)
    # Saving an existing step again replaces it.
    checkpoint.save(tmp_path, state, light, 1200)
    with pytest.warns(UserWarning, match="saved without its replay buffer"):
        assert int(checkpoint.restore(tmp_path)[0].iteration) == 800


def check_stopped_after_saving_the_last_finite_state(out: dict, directory: Path) -> None:
    """The run of `diverging` below: raised after period 1 and saved the state at 200."""
    assert out.get("error") == "FloatingPointError", out
    assert re.search(r"log period 1 \(env steps 200\.\.400\).*saved", out["message"])
    assert checkpoint.latest_step(directory) == 200
    state, _ = checkpoint.restore(directory)
    assert int(state.iteration) == 200 and int(state.learner.step) == 1
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state.learner))
    kernel = state.learner.critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"]
    assert np.max(np.abs(kernel)) > 1e20  # the one huge step was taken and saved


def diverging(changes: dict, directory: Path) -> jaxsac.SACConfig:
    """An absurd critic learning rate: the first gradient step (the last iteration of
    period 0) gives huge but finite parameters; period 1 overflows."""
    return jaxsac.SACConfig(**{**TINY, **changes, "learning_starts": 200, "critic_lr": 1e30,
                               "checkpoint_every": 0, "total_env_steps": 1_000,
                               "checkpoint_dir": str(directory)})


def test_non_finite_losses_stop_training_after_saving_the_last_finite_state(
        tmp_path, jax_cache):
    config = diverging({}, tmp_path)
    [out] = run_child(jax_cache, "train", config.to_json())
    check_stopped_after_saving_the_last_finite_state(out, tmp_path)


def test_non_finite_losses_stop_the_gymnasium_loop_after_saving_the_last_finite_state(
        tmp_path, jax_cache):
    config = diverging({"backend": "gymnasium", "normalize_obs": True,
                        "host_block_steps": 1}, tmp_path)
    [out] = run_child(jax_cache, "train", config.to_json())
    check_stopped_after_saving_the_last_finite_state(out, tmp_path)


V2 = Path(__file__).parent / "data" / "checkpoint_v2"


def leaf_digests(state) -> dict[str, tuple[str, str]]:
    """{leaf path: (dtype, SHA-256 of its bytes)}, typed keys by their key data, as
    tests/data/checkpoint_v2/write.py records them."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        array = np.ascontiguousarray(jax.device_get(leaf))
        out[jax.tree_util.keystr(path)] = (array.dtype.name,
                                           hashlib.sha256(array.tobytes()).hexdigest())
    return out


def test_a_format_2_checkpoint_restores_bit_for_bit_and_resumes(tmp_path):
    """tests/data/checkpoint_v2: a tiny Pendulum-v1 run saved at 400 env steps by the code
    before the storage layer was split out (format 2), with the digests that code took
    of the state it saved and of the state after resuming it for one log period."""
    recorded = json.loads((V2 / "digests.json").read_text())
    directory = tmp_path / "ckpt"
    copy_steps(V2, directory, [400])
    state, stored = checkpoint.restore(directory)  # every checksum verified
    assert stored == jaxsac.SACConfig.from_dict(recorded["config"]).replace(
        checkpoint_dir="/tmp/checkpoint_v2")
    assert leaf_digests(state) == {path: (leaf["dtype"], leaf["sha256"])
                                   for path, leaf in recorded["saved"].items()}
    assert str(jax.random.key_impl(state.key)) == "threefry2x32"
    assert jaxsac.load_policy(directory).step == 400
    result = jaxsac.train(stored.replace(checkpoint_dir=str(directory), resume=True,
                                         total_env_steps=600), progress=False)
    assert {name: result.metrics[name].tolist() for name in ("env_steps", "grad_steps")} \
        == recorded["resumed_metrics"] == {"env_steps": [600], "grad_steps": [501]}
    assert checkpoint.latest_step(directory) == 600
    # Integer leaves (counters, flags, the key) are the same bits on any machine; float
    # leaves come from float arithmetic, so only their sums are compared.
    resumed = leaf_digests(result.state)
    sums = {jax.tree_util.keystr(path): float(np.sum(np.asarray(
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        else x), dtype=np.float64))
        for path, x in jax.tree_util.tree_flatten_with_path(result.state)[0]}
    assert set(resumed) == set(recorded["resumed"])
    for path, leaf in recorded["resumed"].items():
        assert resumed[path][0] == leaf["dtype"], path
        if np.issubdtype(np.dtype(leaf["dtype"]), np.floating):
            np.testing.assert_allclose(sums[path], leaf["sum"], rtol=1e-3, atol=1e-3,
                                       err_msg=path)
        else:
            assert resumed[path][1] == leaf["sha256"], path


def item_of_first_key(names: list[str]) -> tuple[str, str]:
    return names[0], ".".join(names[1:]) or "value"


def test_typed_keys_anywhere_in_a_tree_are_stored_with_their_implementation(tmp_path):
    """Keys of three implementations nested in dicts, lists and tuples (one with a
    leading axis) come back as keys of the same implementation and key data; a
    zero-size array comes back too."""
    tree = {"run": jax.random.key(1),
            "envs": [{"rng": jax.random.split(jax.random.key(2, impl="rbg"), 3)},
                     (jnp.arange(4.0), jax.random.key(3, impl="unsafe_rbg"))],
            "contacts": jnp.zeros((0, 2), jnp.float32)}
    items, key_impls, order, treedef = storage.flatten(tree, item_of_first_key)
    assert key_impls == {"run": {"value": "threefry2x32"},
                         "envs": {"0.rng": "rbg", "1.1": "unsafe_rbg"}}
    storage.write_step(str(tmp_path), 7, items, key_impls, {"kind": "test"}, {}, 1)
    manager = storage.reader(str(tmp_path))
    try:
        meta = storage.read_json(manager, str(tmp_path), 7, ("meta",))["meta"]
        targets = storage.flatten(jax.eval_shape(lambda: tree), item_of_first_key)[0]
        arrays = storage.read_arrays(manager, str(tmp_path), 7, meta, targets)
    finally:
        manager.close()
    assert meta["kind"] == "test" and meta["key_impls"] == key_impls
    restored = storage.unflatten(treedef, order, arrays, meta["key_impls"])
    assert [x.dtype for x in jax.tree.leaves(restored)] == [x.dtype
                                                           for x in jax.tree.leaves(tree)]
    assert leaves_equal(restored, tree)
    for got, want in ((restored["run"], tree["run"]),
                      (restored["envs"][0]["rng"], tree["envs"][0]["rng"]),
                      (restored["envs"][1][1], tree["envs"][1][1])):
        assert str(jax.random.key_impl(got)) == str(jax.random.key_impl(want))
        draw = jax.vmap(jax.random.bits)  # one draw per key, from each generator
        np.testing.assert_array_equal(draw(got.reshape(-1)), draw(want.reshape(-1)))


def test_a_different_encoder_or_critic_family_is_a_structural_difference():
    """The stored parameters were trained through the stored encoder and critic family:
    another name is refused on restore like another network size. "auto" builds the
    "flat" encoder for Pendulum's vector observation: a checkpoint of either restores
    into the other (those of runs before "auto" was the default stored "flat")."""
    stored = jaxsac.SACConfig(hidden_sizes=(8,))
    requested = stored.replace(encoder="other", critic="mine", hidden_sizes=(16,))
    assert checkpoint.config_differences(stored, requested) == [
        "hidden_sizes: stored (8,), requested (16,)",
        "encoder: stored 'auto', requested 'other'",
        "critic: stored 'ensemble', requested 'mine'"]
    assert checkpoint.config_differences(stored.replace(encoder="flat"), stored) == []
    assert checkpoint.config_differences(stored, stored.replace(encoder="conv")) == [
        "encoder: stored 'auto', requested 'conv'"]


def test_the_learner_s_hyperparameter_leaves_keep_their_checkpoint_names_and_order():
    """Hyperparams follows the declaration order of the LEARNER_ARRAY fields: its leaves
    are stored and flattened in this order, so moving a field would change both."""
    assert Hyperparams._fields == ("actor_lr", "critic_lr", "alpha_lr", "tau", "initial_alpha")
