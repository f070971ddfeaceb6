"""JAX's persistent compilation cache: compiled programs kept on disk between processes.

    jaxsac.compilation.enable_cache()            # ~/.cache/jaxsac/xla, or $JAXSAC_CACHE_DIR
    jaxsac.compilation.enable_cache("/scratch/xla")

A fresh process that runs a config it ran before then loads its programs instead of
compiling them (the CLI and `make train` enable it by default). Within one process
`train` already keeps its compiled programs between calls (jaxsac.loop.jax_loop).
"""

from __future__ import annotations

import os

import jax

CACHE_VARIABLE = "JAXSAC_CACHE_DIR"


def default_cache_dir() -> str:
    """$JAXSAC_CACHE_DIR, else $XDG_CACHE_HOME/jaxsac/xla, else ~/.cache/jaxsac/xla."""
    if os.environ.get(CACHE_VARIABLE):
        return os.environ[CACHE_VARIABLE]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxsac", "xla")


def enable_cache(directory: str | os.PathLike | None = None,
                 min_compile_seconds: float = 0.5) -> str:
    """Turn on JAX's persistent compilation cache in `directory` (default:
    `default_cache_dir()`) for programs that took at least `min_compile_seconds` to
    compile. A directory set through JAX_COMPILATION_CACHE_DIR wins. Returns the
    directory used."""
    directory = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.fspath(
        directory if directory is not None else default_cache_dir())
    if not directory:
        raise ValueError("enable_cache: directory='' is invalid: must be a non-empty path")
    os.makedirs(directory, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    return directory
