"""Programs kept between processes: JAX's persistent compilation cache (a second process
loads what the first compiled) and `KeptProgram` (a second process loads `train`'s
programs without tracing them, and they give the same bits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac import compilation, envs, sharding
from jaxsac.config import SACConfig
from jaxsac.envs import Pendulum
from jaxsac.jax_loop import kept_jax_loop

CHILD = """
import sys, jax, jax.numpy as jnp
import jaxsac
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
directory = jaxsac.compilation.enable_cache(sys.argv[1], min_compile_seconds=0.0)
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() * 3.0 + 1.0)
f(jnp.ones((17, 5))).block_until_ready()
print(directory, len(hits))
"""


def child_env() -> dict[str, str]:
    """This process's environment without any cache folder, and with jaxsac's default
    stores off (as in this test session)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", compilation.CACHE_VARIABLE)}
    return {**env, "JAX_PLATFORMS": "cpu", compilation.SWITCH_VARIABLE: "0"}


def run_child(directory) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(directory)], capture_output=True,
                          text=True, timeout=300, env=child_env(), check=True)
    used, hits = done.stdout.split()[-2:]
    return used, int(hits)


def test_a_second_process_loads_the_programs_the_first_compiled(tmp_path):
    directory = tmp_path / "xla"
    used, hits = run_child(directory)
    entries = len([p for p in directory.iterdir() if p.name != compilation.PROGRAMS_FOLDER])
    assert used == str(directory) and hits == 0 and entries > 0
    assert run_child(directory) == (str(directory), entries)  # every program loaded


def test_the_default_folder_follows_the_environment(monkeypatch, tmp_path):
    import jaxsac

    monkeypatch.setenv("JAXSAC_CACHE_DIR", str(tmp_path / "a"))
    assert jaxsac.compilation.default_cache_dir() == str(tmp_path / "a")
    monkeypatch.delenv("JAXSAC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert jaxsac.compilation.default_cache_dir() == str(tmp_path / "b" / "jaxsac" / "xla")


def test_keep_programs_must_be_a_bool(tmp_path):
    with pytest.raises(ValueError, match="keep_programs='yes'"):
        compilation.enable_cache(tmp_path, keep_programs="yes")


# ------------------------------------------------------------------------ KeptProgram

DEVICES = jax.devices()[:1]


@pytest.fixture
def store(monkeypatch, tmp_path):
    """The KeptProgram store in a temporary folder, for this test only."""
    monkeypatch.setattr(compilation, "_programs_dir", tmp_path)
    return tmp_path


def counted(traces: list):
    """A function that records each trace of it in `traces`."""
    def f(x, scale):
        traces.append(1)
        return jnp.tanh(x @ x.T) * scale, {"sum": jnp.sum(x)}
    return f


def test_a_kept_program_is_stored_once_then_loaded_without_tracing(store):
    traces = []
    x, scale = jnp.arange(12.0).reshape(3, 4) / 10, jnp.float32(2.0)
    expected = jax.jit(counted([]))(x, scale)
    first = compilation.KeptProgram(jax.jit(counted(traces)), "f", "the test program", DEVICES)
    out = first(x, scale)
    first(x, scale)  # the compiled program is kept in the object too
    assert len(traces) == 1 and len(list(store.iterdir())) == 1
    again = compilation.KeptProgram(jax.jit(counted(traces)), "f", "the test program", DEVICES)
    loaded = again(x, scale)
    assert len(traces) == 1  # loaded, not traced
    for got in (out, loaded):
        jax.tree.map(np.testing.assert_array_equal, got, expected)


def _shapes(tree) -> list:
    return [(leaf.shape, leaf.dtype) for leaf in jax.tree.leaves(tree)]


@pytest.mark.parametrize("kept", [True, False])
def test_a_kept_programs_output_shapes_are_its_traced_ones(monkeypatch, tmp_path, kept):
    """output_shapes: the executable's own output types when kept (a second process's
    object loads it and traces nothing), `jax.eval_shape` without the store; either way
    jax.eval_shape of the function is the reference, and a later call compiles nothing
    more."""
    monkeypatch.setattr(compilation, "_programs_dir", tmp_path if kept else None)
    x, scale = jnp.ones((3, 4)), jnp.float32(2.0)
    expected = _shapes(jax.eval_shape(counted([]), x, scale))
    compilation.KeptProgram(jax.jit(counted([])), "f", "shapes", DEVICES)(x, scale)
    traces = []
    program = compilation.KeptProgram(jax.jit(counted(traces)), "f", "shapes", DEVICES)
    assert _shapes(program.output_shapes(x, scale)) == expected
    program(x, scale)
    assert len(traces) == (0 if kept else 1)


def test_another_description_or_argument_type_compiles_anew(store):
    traces = []
    x = jnp.ones((3, 4))
    compilation.KeptProgram(jax.jit(counted(traces)), "f", "one", DEVICES)(x, jnp.float32(1.0))
    compilation.KeptProgram(jax.jit(counted(traces)), "f", "two", DEVICES)(x, jnp.float32(1.0))
    other = compilation.KeptProgram(jax.jit(counted(traces)), "f", "one", DEVICES)
    out, _ = other(jnp.ones((2, 4)), jnp.float32(1.0))
    other(x, 1.0)  # a weakly typed Python float is another signature
    assert len(traces) == 4 and len(list(store.iterdir())) == 4
    np.testing.assert_allclose(out, np.tanh(np.full((2, 2), 4.0)), rtol=1e-6)


def test_a_damaged_file_is_compiled_again_and_replaced(store):
    x, scale = jnp.ones((3, 4)), jnp.float32(3.0)
    compilation.KeptProgram(jax.jit(counted([])), "f", "d", DEVICES)(x, scale)
    [path] = store.iterdir()
    path.write_bytes(b"not a program")
    traces = []
    with pytest.warns(UserWarning, match="could not load"):
        out, _ = compilation.KeptProgram(jax.jit(counted(traces)), "f", "d", DEVICES)(x, scale)
    assert len(traces) == 1 and path.read_bytes() != b"not a program"
    np.testing.assert_allclose(out, 3.0 * np.tanh(np.full((3, 3), 4.0)), rtol=1e-6)
    compilation.KeptProgram(jax.jit(counted(traces)), "f", "d", DEVICES)(x, scale)
    assert len(traces) == 1  # the replacement loads


def test_without_the_store_a_kept_program_is_its_jitted_function(monkeypatch, tmp_path):
    monkeypatch.setattr(compilation, "_programs_dir", None)
    traces = []
    program = compilation.KeptProgram(jax.jit(counted(traces)), "f", "none", DEVICES)
    program(jnp.ones((2, 2)), jnp.float32(1.0))
    assert len(traces) == 1 and program._compiled == {}


TRAIN_CHILD = """
import hashlib, json, sys
import jax, numpy as np
import jaxsac, jaxsac.jax_loop
traces = {"period": 0, "initial": 0}
def counting(name, original):
    def wrapper(*args, **kwargs):
        traces[name] += 1
        return original(*args, **kwargs)
    return wrapper
jaxsac.jax_loop.run_period = counting("period", jaxsac.jax_loop.run_period)
jaxsac.jax_loop.init_state = counting("initial", jaxsac.jax_loop.init_state)
if sys.argv[1] not in ("none", "default"):
    jaxsac.compilation.enable_cache(sys.argv[1])
num_envs, num_seeds = int(sys.argv[2]), int(sys.argv[3])
config = jaxsac.SACConfig(env_id="Pendulum-v1", total_env_steps=300 * num_envs,
                          learning_starts=100 * num_envs, log_every=100 * num_envs,
                          num_envs=num_envs, hidden_sizes=(16, 16), batch_size=32,
                          eval_episodes=1)
result = jaxsac.train(config, num_seeds=num_seeds, progress=False)
leaves = [np.asarray(x) for x in jax.tree.leaves(jax.random.key_data(result.state.key))]
leaves += [np.asarray(x) for x in jax.tree.leaves(result.state.learner)]
leaves += [result.metrics[name] for name in sorted(result.metrics)]
digest = hashlib.sha256(b"".join(x.tobytes() for x in leaves)).hexdigest()
print(json.dumps({"traces": traces, "digest": digest}))
"""


def run_train_child(directory, num_envs: int = 1, num_seeds: int = 2, devices: int = 1,
                    **variables: str) -> dict:
    """TRAIN_CHILD in a fresh process: `directory` given to enable_cache, or "none" (the
    stores off) or "default" (nothing called: what `train` does by default)."""
    env = {**child_env(), "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           **variables}
    done = subprocess.run([sys.executable, "-c", TRAIN_CHILD, str(directory), str(num_envs),
                           str(num_seeds)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_fresh_process_loads_trains_programs_untraced_with_the_same_bits(tmp_path):
    """Cold (compiles and keeps both programs), warm (loads them: no trace) and without
    the store (plain jit): the same final state and metrics, bit for bit."""
    directory = tmp_path / "xla"
    cold = run_train_child(directory)
    assert len(list((directory / compilation.PROGRAMS_FOLDER).iterdir())) == 2
    warm = run_train_child(directory)
    plain = run_train_child("none")
    assert cold["traces"] == {"period": 1, "initial": 1}
    assert warm["traces"] == {"period": 0, "initial": 0}
    assert cold["digest"] == warm["digest"] == plain["digest"]


def test_train_keeps_its_programs_by_default_unless_switched_off(tmp_path):
    """A notebook calling `train` with nothing set: its programs land in
    $XDG_CACHE_HOME/jaxsac/xla and a second process loads them untraced, with the same
    bits; JAXSAC_COMPILATION_CACHE=0 leaves the folder uncreated."""
    default = tmp_path / "cache" / "jaxsac" / "xla"
    off = run_train_child("default", XDG_CACHE_HOME=str(tmp_path / "cache"),
                          **{compilation.SWITCH_VARIABLE: "0"})
    assert not default.exists()
    on = {compilation.SWITCH_VARIABLE: "", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cold = run_train_child("default", **on)
    assert len(list((default / compilation.PROGRAMS_FOLDER).iterdir())) == 2
    warm = run_train_child("default", **on)
    assert cold["traces"] == {"period": 1, "initial": 1}
    assert warm["traces"] == {"period": 0, "initial": 0}
    assert off["digest"] == cold["digest"] == warm["digest"]


DISABLE_CHILD = """
import sys, jax
from jaxsac import compilation
compilation.enable_cache(sys.argv[1])
compilation.disable_cache()
print(jax.config.jax_compilation_cache_dir, compilation._programs_dir,
      compilation.enable_default_cache())
"""


def test_disable_cache_turns_both_stores_off_and_the_default_with_them(tmp_path):
    done = subprocess.run([sys.executable, "-c", DISABLE_CHILD, str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**child_env(), compilation.SWITCH_VARIABLE: ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "None", "None"]


@pytest.mark.parametrize("num_envs", [4, 1], ids=["on four devices", "on the first of four"])
def test_kept_programs_load_onto_their_mesh_devices(tmp_path, num_envs):
    """With four devices, a config that splits over them runs on all four, one that
    does not on the first alone: either program loads onto its own devices."""
    cold = run_train_child(tmp_path, num_envs, num_seeds=1, devices=4)
    warm = run_train_child(tmp_path, num_envs, num_seeds=1, devices=4)
    assert warm["traces"] == {"period": 0, "initial": 0}
    assert cold["digest"] == warm["digest"]


def test_a_folder_that_cannot_be_written_warns_and_the_program_still_runs(monkeypatch,
                                                                          tmp_path):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setattr(compilation, "_programs_dir", blocked / "programs")
    with pytest.warns(UserWarning, match="could not write"):
        out, _ = compilation.KeptProgram(jax.jit(counted([])), "f", "w", DEVICES)(
            jnp.ones((2, 4)), jnp.float32(1.0))
    np.testing.assert_allclose(out, np.tanh(np.full((2, 2), 4.0)), rtol=1e-6)


CHOLESKY_CHILD = """
import sys, jax, jax.numpy as jnp
from jaxsac import compilation
compilation.enable_cache(sys.argv[1])
program = compilation.KeptProgram(
    jax.jit(lambda x: jnp.linalg.cholesky(x @ x.T + 3.0 * jnp.eye(4))), "cholesky", "c",
    jax.devices()[:1])
print(float(program(jnp.arange(16.0).reshape(4, 4) / 10)[3, 3]))
"""


def test_a_program_with_custom_calls_is_left_to_jax_s_cache(tmp_path):
    """LAPACK's Cholesky is a custom call: such an executable, loaded from a kept file,
    crashed the process. It is not kept, and a second process still computes it."""
    x = np.arange(16.0).reshape(4, 4) / 10
    expected = np.linalg.cholesky(x @ x.T + 3.0 * np.eye(4))[3, 3]
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CHOLESKY_CHILD, str(tmp_path)],
                              capture_output=True, text=True, timeout=300, env=child_env())
        assert done.returncode == 0, done.stderr[-2000:]
        np.testing.assert_allclose(float(done.stdout.split()[-1]), expected, rtol=1e-5)
    assert not (tmp_path / compilation.PROGRAMS_FOLDER).exists()
    assert compilation._foreign_calls(
        jax.jit(jnp.linalg.cholesky).lower(jnp.eye(3)).as_text()) == {"lapack_spotrf_ffi"}


class OutsidePendulum(Pendulum):
    """A JAX env whose code is outside jaxsac (it could change under the same config)."""


def test_only_envs_of_jaxsac_s_own_code_have_their_programs_kept(monkeypatch, store):
    monkeypatch.setitem(envs.JAX_ENVS, "jaxsac_test/OutsidePendulum-v0", (OutsidePendulum, 200))
    assert envs.is_jaxsac_code("Pendulum-v1") and envs.is_jaxsac_code("MultiAgentPendulum-v1")
    assert not envs.is_jaxsac_code("jaxsac_test/OutsidePendulum-v0")
    assert not envs.is_jaxsac_code("playground/CartpoleBalance")
    assert not envs.is_jaxsac_code("HalfCheetah-v5")
    tiny = dict(total_env_steps=100, learning_starts=50, log_every=50, hidden_sizes=(8,),
                batch_size=8, eval_episodes=1)
    outside = SACConfig(env_id="jaxsac_test/OutsidePendulum-v0", **tiny)
    mesh = sharding.check_mesh(None, "test", outside)
    loop = kept_jax_loop(outside, 1, mesh)
    loop.init(jax.random.key(0))
    assert loop._init.description is None and not any(store.iterdir())
    own = kept_jax_loop(SACConfig(env_id="Pendulum-v1", **tiny), 1, mesh)
    own.init(jax.random.key(0))
    assert own._init.description is not None and len(list(store.iterdir())) == 1
