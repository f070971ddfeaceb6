"""Compiled programs kept on disk between processes.

    jaxsac.compilation.enable_cache()            # ~/.cache/jaxsac/xla, or $JAXSAC_CACHE_DIR
    jaxsac.compilation.enable_cache("/scratch/xla")
    jaxsac.compilation.disable_cache()           # or JAXSAC_COMPILATION_CACHE=0

On by default: `train` and `make_train` call `enable_default_cache` first, which turns
both stores on in `default_cache_dir()` (in the folder of JAX's own cache when the user
set one) unless the process chose otherwise before: `enable_cache`, `disable_cache`, or
the environment variable JAXSAC_COMPILATION_CACHE set to 0, false or off. Two stores in
one folder:

- JAX's persistent compilation cache, for every program: a fresh process that runs a
  config it ran before loads its programs instead of compiling them. JAX finds a
  program by its lowered module, so the program is still traced and lowered first.
- `KeptProgram`s, for the programs `train` runs (the initial state and the log period):
  their executables are kept whole, under a key made without tracing (the program's
  description, jaxsac's source, the library versions, JAX's settings, the devices and
  the arguments' types), so a fresh process skips tracing and lowering too. Not kept,
  so only in JAX's cache: a program that calls custom-call kernels (LAPACK's, in MuJoCo
  Playground's physics), and one whose env code is not jaxsac's (a Playground task, a
  class added to `jaxsac.envs.JAX_ENVS`), which could change under the same key.

Within one process `train` already keeps its compiled programs between calls
(jaxsac.jax_loop.kept_jax_loop). Loading a program runs code from the folder: keep it private,
as JAX's own cache. Nothing is evicted (a few MB per config and jaxsac version): delete
the folder to reclaim the space.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import os
import pathlib
import pickle
import platform
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.experimental import serialize_executable
from jax.experimental.compilation_cache import compilation_cache

from jaxsac import checks
from jaxsac.config import NOT_COMPILED, SACConfig, fields_with

CACHE_VARIABLE = "JAXSAC_CACHE_DIR"
SWITCH_VARIABLE = "JAXSAC_COMPILATION_CACHE"
"""Set to 0, false or off: `train` and `make_train` leave the caches off."""
_OFF = ("0", "false", "off", "no")
PROGRAMS_FOLDER = "programs"
"""The subfolder of the cache directory that holds the `KeptProgram` executables."""

_KEY_FORMAT = "jaxsac-kept-program-1"
_VERSIONED = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "ml_dtypes", "gymnasium",
              "mujoco", "mujoco-mjx", "playground", "brax")
"""Distributions whose code a program may hold: their versions are part of its key."""

_SHARDING_ANNOTATIONS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
"""Custom calls that only annotate shardings: the partitioner removes them."""

_programs_dir: pathlib.Path | None = None
_chosen = False
"""Whether this process chose already (enable_cache, disable_cache, or the default)."""
_enabled_dir: str | None = None
"""The folder `enable_cache` pointed JAX's cache at, None when it did not."""


def program_config(config: SACConfig) -> SACConfig:
    """The config that compiles the programs of `config`: its NOT_COMPILED fields at their
    defaults (total_env_steps: the first log period past learning_starts, which keeps the
    schedule valid). Configs that differ only in those fields compile the same programs,
    so this is the key a process keeps them under."""
    defaults = {f.name: f.default for f in dataclasses.fields(SACConfig)}
    reset = {name: defaults[name] for name in fields_with(NOT_COMPILED)}
    reset["total_env_steps"] = config.log_every * (config.learning_starts // config.log_every + 1)
    return config.replace(**reset)


def default_cache_dir() -> str:
    """$JAXSAC_CACHE_DIR, else $XDG_CACHE_HOME/jaxsac/xla, else ~/.cache/jaxsac/xla."""
    if os.environ.get(CACHE_VARIABLE):
        return os.environ[CACHE_VARIABLE]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxsac", "xla")


def enable_cache(directory: str | os.PathLike | None = None,
                 min_compile_seconds: float = 0.0, keep_programs: bool = True) -> str:
    """Turn on JAX's persistent compilation cache in `directory` (default:
    `default_cache_dir()`) for programs that took at least `min_compile_seconds` to
    compile, and (`keep_programs`) the `KeptProgram` store in its subfolder
    PROGRAMS_FOLDER. A directory set through JAX_COMPILATION_CACHE_DIR wins. Returns the
    directory used."""
    global _programs_dir, _chosen, _enabled_dir
    checks.check_bool("enable_cache", "keep_programs", keep_programs)
    directory = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.fspath(
        directory if directory is not None else default_cache_dir())
    if not directory:
        raise ValueError("enable_cache: directory='' is invalid: must be a non-empty path")
    os.makedirs(directory, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    _programs_dir = pathlib.Path(directory, PROGRAMS_FOLDER) if keep_programs else None
    _chosen, _enabled_dir = True, directory
    return directory


def disable_cache() -> None:
    """Both stores off for this process, and `enable_default_cache` a no-op: programs
    are compiled afresh in each process (JAX's cache stays on only if its folder was set
    outside jaxsac)."""
    global _programs_dir, _chosen, _enabled_dir
    if _enabled_dir is not None:
        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()
    _programs_dir, _chosen, _enabled_dir = None, True, None


def enable_default_cache() -> str | None:
    """`enable_cache()` the first time it is called in a process, unless the process
    chose already (`enable_cache`, `disable_cache`) or $JAXSAC_COMPILATION_CACHE turns it
    off. A folder set for JAX's own cache (jax_compilation_cache_dir) is used as it is;
    one that cannot be created gives a warning and the run goes on without the stores.
    Returns the folder in use, None when off."""
    global _chosen
    if _chosen:
        return _enabled_dir
    _chosen = True
    if os.environ.get(SWITCH_VARIABLE, "").strip().lower() in _OFF:
        return None
    try:
        return enable_cache(jax.config.jax_compilation_cache_dir or None)
    except OSError as error:
        warnings.warn(f"the compilation cache is off: {error}; set {CACHE_VARIABLE} to a "
                      f"writable folder, or {SWITCH_VARIABLE}=0", stacklevel=3)
        return None


class KeptProgram:
    """`jitted(*args)`, with its executable kept in the store `enable_cache` turned on.

    jitted: a `jax.jit`-wrapped function. description: everything, besides jaxsac's
    source and the environment (`_environment`), that decides the program `jitted`
    traces to (for `train`'s programs: the config, the number of seeds and the mesh);
    None where that cannot be said (code from outside jaxsac): never stored.
    devices: the devices the program runs on (a loaded executable is bound to them).
    An executable is stored under a hash of both and of the arguments' tree, shapes,
    dtypes and shardings, so any change of these compiles anew. Without the store this
    is `jitted` itself. Either way each signature is compiled or loaded once per object.
    """

    def __init__(self, jitted: Callable, name: str, description: str | None,
                 devices: Sequence[jax.Device]):
        self.jitted, self.name, self.description = jitted, name, description
        self.devices = list(devices)
        self._compiled: dict[str, Any] = {}

    def __call__(self, *args: Any) -> Any:
        if not self._kept:
            return self.jitted(*args)
        return self._executable(args)(*args)

    def output_shapes(self, *args: Any) -> Any:
        """The outputs' jax.ShapeDtypeStructs for `args`, nothing run or allocated: from
        the executable (loaded or compiled once, as a call would) when it is kept, else
        traced (`jax.eval_shape`, whose trace a later call reuses)."""
        if not self._kept:
            return jax.eval_shape(self.jitted, *args)
        return self._executable(args).out_info

    @property
    def _kept(self) -> bool:
        return _programs_dir is not None and self.description is not None

    def _executable(self, args: tuple) -> Any:
        signature = _signature(args)
        compiled = self._compiled.get(signature)
        if compiled is None:
            compiled = self._compiled[signature] = self._load_or_compile(args, signature)
        return compiled

    def key(self, signature: str) -> str:
        parts = (_KEY_FORMAT, self.name, self.description, repr(self.devices),
                 _environment(), _jax_settings(), signature)
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _load_or_compile(self, args: tuple, signature: str):
        path = _programs_dir / f"{self.name}-{self.key(signature)}.pkl"
        if path.exists():
            try:
                with open(path, "rb") as file:
                    payload, in_tree, out_tree = pickle.load(file)
                return serialize_executable.deserialize_and_load(
                    payload, in_tree, out_tree, execution_devices=self.devices)
            except Exception as error:  # a damaged or foreign file: compile and replace it
                warnings.warn(f"KeptProgram {self.name!r}: could not load {path} ({error!r}); "
                              "compiling it again", stacklevel=3)
        lowered = self.jitted.lower(*args)
        if _foreign_calls(lowered.as_text()):
            return lowered.compile()  # not kept: JAX's cache stores it safely
        with _without_jax_cache():
            compiled = lowered.compile()
        _store(compiled, path)
        return compiled


def _foreign_calls(module_text: str) -> set[str]:
    """The custom-call targets of a lowered module (e.g. LAPACK's, under
    `jnp.linalg.cholesky`) other than the partitioner's sharding annotations. An executable
    that calls them crashes when loaded by `serialize_executable` on the CPU, so such a
    program is not kept (it goes through JAX's cache, which loads it correctly)."""
    targets = set(re.findall(r"custom_call @([\w.]+)", module_text))
    return targets - _SHARDING_ANNOTATIONS


@contextlib.contextmanager
def _without_jax_cache() -> Iterator[None]:
    """JAX's persistent cache off for a compilation. An executable JAX loaded from its
    cache cannot be serialized again on the CPU (its re-serialization fails when run),
    so a kept program is always compiled afresh."""
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


def _store(compiled: Any, path: pathlib.Path) -> None:
    """Write the executable atomically (a temporary file renamed over `path`). A program
    that cannot be serialized is not stored; a folder that cannot be written to gives a
    warning, and the run goes on."""
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    except (ValueError, NotImplementedError):
        return
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as file:
            temporary = file.name
            pickle.dump((payload, in_tree, out_tree), file)
        os.replace(temporary, path)
    except OSError as error:
        warnings.warn(f"KeptProgram: could not write {path} ({error!r}); the program is "
                      "compiled again in the next process", stacklevel=4)
        if temporary is not None and os.path.exists(temporary):
            os.remove(temporary)


def _signature(args: tuple) -> str:
    """The arguments' tree and each leaf's shape, dtype, weak type and sharding."""
    leaves, tree = jax.tree.flatten(args)
    described = [(aval.shape, str(aval.dtype), aval.weak_type,
                  str(getattr(leaf, "sharding", None)))
                 for leaf in leaves for aval in [jax.typeof(leaf)]]
    return f"{tree}{described}"


def _jax_settings() -> str:
    """JAX's settings that can change a traced program (not logging or cache places)."""
    return repr(sorted((name, repr(value)) for name, value in jax.config.values.items()
                       if "cache" not in name and "log" not in name))


@functools.lru_cache(maxsize=1)
def _environment() -> str:
    """jaxsac's source, the library versions, XLA's flags, the backend and the CPU."""
    package = pathlib.Path(__file__).parent
    source = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json"):
            source.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    devices = jax.devices()
    parts = [source.hexdigest(), repr([(name, _version(name)) for name in _VERSIONED]),
             os.environ.get("XLA_FLAGS", ""), devices[0].client.platform,
             devices[0].client.platform_version, repr([d.device_kind for d in devices]),
             f"{jax.process_index()} of {jax.process_count()}", platform.machine(),
             _cpu_flags()]
    return "\0".join(parts)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cpu_flags() -> str:
    """The host CPU's feature flags (XLA compiles CPU code for them), where Linux says."""
    try:
        with open("/proc/cpuinfo") as file:
            return next((line for line in file if line.startswith("flags")), "")
    except OSError:
        return platform.processor()
