"""The persistent compilation cache: a second process loads what the first compiled."""

from __future__ import annotations

import os
import subprocess
import sys

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


def run_child(directory) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(directory)], capture_output=True,
                          text=True, timeout=300, env={**env, "JAX_PLATFORMS": "cpu"},
                          check=True)
    used, hits = done.stdout.split()[-2:]
    return used, int(hits)


def test_a_second_process_loads_the_programs_the_first_compiled(tmp_path):
    directory = tmp_path / "xla"
    used, hits = run_child(directory)
    entries = len(list(directory.iterdir()))
    assert used == str(directory) and hits == 0 and entries > 0
    assert run_child(directory) == (str(directory), entries)  # every program loaded


def test_the_default_folder_follows_the_environment(monkeypatch, tmp_path):
    import jaxsac

    monkeypatch.setenv("JAXSAC_CACHE_DIR", str(tmp_path / "a"))
    assert jaxsac.compilation.default_cache_dir() == str(tmp_path / "a")
    monkeypatch.delenv("JAXSAC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert jaxsac.compilation.default_cache_dir() == str(tmp_path / "b" / "jaxsac" / "xla")
