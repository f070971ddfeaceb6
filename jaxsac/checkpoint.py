"""Checkpoints of a run with Orbax: `save`, `restore`, `latest_step`, and the actor
alone for `jaxsac.load_policy` (`restore_actor`).

    checkpoint.save("runs/x/checkpoints", train_state, config, step=env_steps)
    state, config = checkpoint.restore("runs/x/checkpoints")              # newest step

A checkpoint is one Orbax step folder `<directory>/<env steps>/` with these items:

    learner   LearnerState leaves: params, target critics, optimizer states, log α, ...
    runner    TrainState.runner: JAX env states, running episode sums, observation
              statistics (gymnasium runs: the observation statistics only)
    progress  the run's key (as key data), iteration counter, completed-episode stats
    buffer    ReplayState leaves (only when `config.checkpoint_buffer`)
    config    the SACConfig as JSON
    meta      JSON: format version, seed axis, env spaces, each array's shape, dtype and
              checksum

Array items are flat dicts `{"actor_params.params.MLP_0.Dense_0.kernel": array, ...}`;
`restore` puts them back into the structure of a template TrainState (given as `like`,
or built from the stored config with `jax.eval_shape`), so every NamedTuple and empty
node comes back exactly. Leaves keep a leading seed axis when several seeds were saved.

Orbax writes each step into a temporary folder and renames it when complete, so a
process killed during a save leaves the previous steps intact and `latest_step` never
returns a half-written one. `restore` checks every array against the checksum taken at
save time, so a damaged file is an error naming the directory and step, never silently
different numbers. Saves are synchronous: `save` returns once the step is on disk.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks, connectors, envs
from jaxsac.assembly import assemble, example_step, host_assembly, init_state, make_buffer
from jaxsac.config import SACConfig

if TYPE_CHECKING:
    import orbax.checkpoint as ocp

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 2 adds `json_sha256` to meta: a SHA-256 of the config and meta items (without
that field), so an edited config or env metadata (action bounds) is an error. Version 1
checkpoints are read as they are."""
ARRAY_ITEMS = ("learner", "runner", "progress", "buffer")
"""Orbax items holding arrays. The TrainState fields learner, runner and buffer each have
an item of their own; every other field (key, iteration, episodes) goes to progress."""

FINALIZED_MARKER = "_CHECKPOINT_METADATA"
"""The file Orbax writes into a step folder when the step is complete."""

STRUCTURAL_FIELDS = ("env_id", "num_envs", "hidden_sizes", "num_q", "activation",
                     "normalize_obs", "prng_impl", "buffer_capacity", "prioritized",
                     "num_agents", "policy_mapping")
"""SACConfig fields a restored state must share with the requested config: they fix the
arrays' shapes, or what the arrays mean (`activation`, `normalize_obs`: the parameters
were trained on normalized observations or not; `prng_impl`: the generator the key is
for)."""

__all__ = ["CorruptCheckpointError", "config_differences", "latest_step", "restore",
           "restore_actor", "save", "StoredActor"]


class CorruptCheckpointError(RuntimeError):
    """A checkpoint step that exists but cannot be read back as it was written."""


# --- names, items and checksums ------------------------------------------------------


def _key_name(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _item_of(path: tuple) -> tuple[str, str]:
    """(item, leaf name within the item) of a TrainState leaf path."""
    names = [_key_name(entry) for entry in path]
    if names[0] in ("learner", "runner", "buffer"):
        return names[0], ".".join(names[1:]) or "value"
    return "progress", ".".join(names)


def _named_leaves(tree: Any) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]], Any]:
    """Split a storable TrainState into {item: {name: leaf}}.

    Returns (items, the (item, name) of each leaf in flattening order, treedef).
    """
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    items: dict[str, dict[str, Any]] = {}
    order = []
    for path, leaf in leaves_with_paths:
        item, name = _item_of(path)
        if name in items.setdefault(item, {}):
            raise ValueError(f"checkpoint: two TrainState leaves are both named {item}/{name}")
        items[item][name] = leaf
        order.append((item, name))
    return items, order, treedef


def _is_typed_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _storable(state: Any) -> Any:
    """The TrainState with its typed key replaced by the key's raw data (uint32)."""
    if not _is_typed_key(state.key):
        return state
    if isinstance(state.key, jax.ShapeDtypeStruct):  # an abstract template
        return state.replace(key=jax.eval_shape(jax.random.key_data, state.key))
    return state.replace(key=jax.random.key_data(state.key))


def _seed_axis(state: Any) -> tuple[bool, int]:
    """(has a leading seed axis, number of seeds), read off `state.iteration`."""
    shape = np.shape(state.iteration)
    if len(shape) == 0:
        return False, 1
    return True, int(shape[0])


def _words(x: jax.Array) -> jax.Array:
    """The array's bits as a flat uint32 vector."""
    if x.dtype == jnp.bool_ or x.dtype.itemsize < 4:
        return x.astype(jnp.uint32).ravel()
    return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()  # 8-byte types: 2 words


@jax.jit
def _checksums_device(arrays: dict[str, jax.Array]) -> dict[str, jax.Array]:
    def one(x):
        w = _words(x)
        position = jnp.arange(w.shape[0], dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
        return jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * position, dtype=jnp.uint32)])
    return {name: one(x) for name, x in arrays.items()}


def _checksums(arrays: dict[str, Any]) -> dict[str, list[int]]:
    """{name: [sum of words, position-weighted sum of words]} mod 2**32, computed on the
    arrays' device (integer sums: the same bits give the same value on any backend)."""
    if not arrays:
        return {}
    sums = jax.device_get(_checksums_device(arrays))
    return {name: [int(v) for v in np.asarray(s)] for name, s in sums.items()}


def _describe(x: Any) -> list[Any]:
    return [list(np.shape(x)), np.dtype(x.dtype).name]


# --- env spaces ----------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _spaces(env_id: str, backend: str, obs_keys: tuple[str, ...] | None
            ) -> tuple[gymnasium.Space, gymnasium.Space]:
    env = envs.make(env_id, backend=backend, obs_keys=obs_keys)
    return env.observation_space, env.action_space


def _env_meta(config: SACConfig) -> dict[str, Any]:
    backend = envs.resolve_backend(config.env_id, config.backend)
    obs_space, act_space = _spaces(config.env_id, backend, config.obs_keys)
    return {"backend": backend, "obs_shape": list(obs_space.shape),
            "obs_dim": connectors.flat_obs_dim(obs_space),
            **connectors.module_actions(act_space, f"env {config.env_id!r}").metadata()}


# --- the Orbax manager ---------------------------------------------------------------


def _check_directory(directory: Any, caller: str) -> str:
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        checks.fail(f"checkpoint.{caller}", "directory", directory, "a non-empty path")
    return os.path.abspath(os.fspath(directory))


def _check_step(step: Any, caller: str) -> int:
    if not checks.is_int(step) or step < 0:
        checks.fail(f"checkpoint.{caller}", "step", step, "an integer >= 0 (env steps)")
    return int(step)


def _orbax():
    """orbax.checkpoint, imported on first use: `import jaxsac` and runs that never save
    or restore do not pay for its import (about 0.2 s)."""
    import orbax.checkpoint

    return orbax.checkpoint


def _manager(directory: str, max_to_keep: int | None = None) -> ocp.CheckpointManager:
    ocp = _orbax()
    if max_to_keep is None:  # reading: creates, deletes and cleans up nothing
        options = ocp.CheckpointManagerOptions(create=False, enable_async_checkpointing=False)
    else:
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
            cleanup_tmp_directories=True)
    return ocp.CheckpointManager(directory, options=options)


def _steps(directory: str) -> list[int]:
    """Complete steps in `directory`, oldest first ([] when it does not exist): step
    folders Orbax finalized, which it marks with a metadata file (a folder merely named
    like a step is not a checkpoint; a finalized step that was damaged later is listed,
    and reading it is an error)."""
    if not os.path.isdir(directory):
        return []
    manager = _manager(directory)
    try:
        steps = manager.all_steps()
    finally:
        manager.close()
    return sorted(s for s in steps
                  if os.path.isfile(os.path.join(directory, str(s), FINALIZED_MARKER)))


def latest_step(directory: str | os.PathLike) -> int | None:
    """Env steps of the newest complete checkpoint in `directory`; None when it has none.

    Steps whose save did not finish (a killed process) are never complete.
    """
    steps = _steps(_check_directory(directory, "latest_step"))
    return steps[-1] if steps else None


# --- save ----------------------------------------------------------------------------


def save(directory: str | os.PathLike, train_state: Any, config: SACConfig, step: int) -> None:
    """Write `train_state` (a TrainState, optionally with a leading seed axis) and
    `config` as checkpoint `step` (env steps) of `directory`, atomically.

    Keeps the newest `config.max_to_keep` steps; leaves the replay buffer out when
    `config.checkpoint_buffer` is False. Saving a step that already exists replaces it
    (and does nothing when the stored arrays are the same bits).
    """
    directory = _check_directory(directory, "save")
    step = _check_step(step, "save")
    if not isinstance(config, SACConfig):
        raise ValueError(f"checkpoint.save: config={type(config).__name__} is invalid: must "
                         "be a SACConfig")
    for field in ("learner", "buffer", "runner", "key", "iteration"):
        if not hasattr(train_state, field):
            raise ValueError(f"checkpoint.save: train_state={type(train_state).__name__} has "
                             f"no field {field!r}: must be a jaxsac TrainState")
    items, _, _ = _named_leaves(_storable(train_state))
    if not config.checkpoint_buffer:
        items.pop("buffer", None)
    seed_axis, num_seeds = _seed_axis(train_state)
    checksums = {item: _checksums(arrays) for item, arrays in items.items()}
    meta = {
        "format_version": FORMAT_VERSION,
        "env_steps": step,
        "seed_axis": seed_axis,
        "num_seeds": num_seeds,
        "key_impl": (str(jax.random.key_impl(train_state.key))
                     if _is_typed_key(train_state.key) else None),
        "buffer_saved": "buffer" in items,
        **_env_meta(config),
        "arrays": {item: {name: _describe(x) for name, x in arrays.items()}
                   for item, arrays in items.items()},
        "checksums": checksums,
    }
    meta["json_sha256"] = _json_sha256(config.to_dict(), meta)
    manager = _manager(directory, config.max_to_keep)
    try:
        if step in manager.all_steps():
            if _stored_checksums(manager, directory, step) == checksums:
                return
            manager.delete(step)
        ocp = _orbax()
        args = {item: ocp.args.StandardSave(arrays) for item, arrays in items.items()}
        manager.save(step, args=ocp.args.Composite(
            **args, config=ocp.args.JsonSave(config.to_dict()), meta=ocp.args.JsonSave(meta)),
            force=True)
        manager.wait_until_finished()
    finally:
        manager.close()


def _stored_checksums(manager: ocp.CheckpointManager, directory: str, step: int) -> Any:
    try:
        return _read_json(manager, directory, step)[1]["checksums"]
    except (CorruptCheckpointError, KeyError):
        return None


def _json_sha256(config: dict[str, Any], meta: dict[str, Any]) -> str:
    """SHA-256 of the config and meta items as canonical JSON (meta without this hash)."""
    body = {"config": config, "meta": {k: v for k, v in meta.items() if k != "json_sha256"}}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# --- restore -------------------------------------------------------------------------


def _corrupt(directory: str, step: int, what: str, error: BaseException | None,
             others: Sequence[int]) -> CorruptCheckpointError:
    older = [s for s in others if s != step]
    hint = (f"; other steps there: {older} (restore one with step=..., or delete "
            f"{os.path.join(directory, str(step))} to resume from the newest of them)"
            if older else "; there is no other step to fall back to")
    lines = str(error).strip().splitlines() or [""]
    message = lines[0][:300] + (" ..." if len(lines) > 1 or len(lines[0]) > 300 else "")
    cause = f": {type(error).__name__}: {message}" if error is not None else ""
    return CorruptCheckpointError(
        f"checkpoint step {step} in {directory} is corrupt or incomplete ({what}){cause}{hint}")


def _resolve_step(directory: str, step: int | None, caller: str) -> tuple[int, list[int]]:
    steps = _steps(directory)
    if step is None:
        if not steps:
            raise FileNotFoundError(f"checkpoint.{caller}: no checkpoint in {directory} "
                                    f"({'empty' if os.path.isdir(directory) else 'no such'} "
                                    "directory)")
        return steps[-1], steps
    step = _check_step(step, caller)
    if step not in steps:
        raise FileNotFoundError(f"checkpoint.{caller}: no checkpoint step {step} in "
                                f"{directory}; steps there: {steps}")
    return step, steps


def _read_json(manager: ocp.CheckpointManager, directory: str,
               step: int) -> tuple[SACConfig, dict[str, Any]]:
    ocp = _orbax()
    try:
        stored = manager.restore(step, args=ocp.args.Composite(
            config=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()))
        config, meta = stored["config"], stored["meta"]
        version = meta.get("format_version") if isinstance(meta, dict) else None
        if version not in READABLE_VERSIONS:
            raise ValueError(f"format_version {version!r}; this jaxsac reads "
                             f"{list(READABLE_VERSIONS)}")
        if version >= 2 and meta.get("json_sha256") != _json_sha256(config, meta):
            raise ValueError("the config or meta item was changed after the save (their "
                             "SHA-256 differs from the one taken at save time)")
        return SACConfig.from_dict(config), meta
    except Exception as e:  # noqa: BLE001 - any failure to read is reported as corruption
        raise _corrupt(directory, step, "config or meta item unreadable", e,
                       manager.all_steps()) from e


def config_differences(stored: SACConfig, requested: SACConfig,
                       stored_env: dict[str, Any] | None = None) -> list[str]:
    """Lines "field: stored X, requested Y" for each difference that changes the state's
    arrays (STRUCTURAL_FIELDS, the backend, obs and action shapes, the number of data
    shards (None counts as 1), gradient clipping on or off). Fields such as
    total_env_steps or learning rates may differ."""
    out = []
    stored_env = stored_env or _env_meta(stored)
    requested_env = _env_meta(requested)
    if stored_env["backend"] != requested_env["backend"]:
        out.append(f"backend: stored {stored_env['backend']!r}, requested "
                   f"{requested_env['backend']!r} (the runner state differs)")
    for name in STRUCTURAL_FIELDS:
        a, b = getattr(stored, name), getattr(requested, name)
        if a != b:
            out.append(f"{name}: stored {a!r}, requested {b!r}")
    if stored.num_data_shards != requested.num_data_shards:
        out.append(f"data_shards: stored {stored.data_shards!r}, requested "
                   f"{requested.data_shards!r} (the replay buffer has one part per shard)")
    if (stored.grad_clip is None) != (requested.grad_clip is None):
        out.append(f"grad_clip: stored {stored.grad_clip!r}, requested {requested.grad_clip!r}"
                   " (on/off changes the optimizer state)")
    for name in ("obs_shape", "act_shape"):
        a, b = tuple(stored_env[name]), tuple(requested_env[name])
        if a != b:
            out.append(f"{name}: stored {a!r}, requested {b!r}")
    a, b = (env.get("act_kind", "continuous") for env in (stored_env, requested_env))
    if a != b:
        out.append(f"action space: stored {a!r}, requested {b!r}")
    return out


def _init_fn(config: SACConfig, meta: dict[str, Any]) -> Callable[[jax.Array], Any]:
    """key -> a fresh TrainState shaped like the stored one (one seed)."""
    if meta["backend"] == "jax":
        assembly = assemble(config)
    else:
        assembly = host_assembly(config, meta["obs_dim"], connectors.actions_from_metadata(meta))
    with_runner = "runner" in meta["arrays"]

    def init(key):
        state = init_state(assembly, key)
        return state if with_runner else state.replace(runner=None)

    return init


def _template_keys(meta: dict[str, Any]) -> jax.Array:
    key = jax.random.key(0)
    return jax.random.split(key, meta["num_seeds"]) if meta["seed_axis"] else key


def _init_template(config: SACConfig, meta: dict[str, Any]) -> Any:
    """An abstract TrainState like the stored one (eval_shape; key as key data)."""
    init = _init_fn(config, meta)
    if meta["seed_axis"]:
        init = jax.vmap(init)
    return jax.eval_shape(lambda keys: _storable(init(keys)), _template_keys(meta))


def _empty_buffer(config: SACConfig, meta: dict[str, Any]) -> Any:
    """A fresh ReplayState for the stored shapes (with the seed axis, if any)."""
    buffer = make_buffer(config, config.gamma)
    example = example_step(meta["obs_dim"], connectors.actions_from_metadata(meta))
    empty = jax.jit(lambda: buffer.init(example))()
    if meta["seed_axis"]:
        empty = jax.tree.map(lambda x: jnp.broadcast_to(x, (meta["num_seeds"], *x.shape)),
                             empty)
    return empty


def _abstract(x: Any) -> jax.ShapeDtypeStruct:
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)


def _shape_differences(items: dict[str, dict[str, Any]], meta: dict[str, Any],
                       wanted: Sequence[str], subset: bool = False) -> list[str]:
    """Lines naming each array whose presence, shape or dtype differs between the
    template `items` and the checkpoint (only the template's arrays when `subset`)."""
    out = []
    for item in wanted:
        template = {name: _describe(x) for name, x in items.get(item, {}).items()}
        stored = meta["arrays"].get(item, {})
        names = set(template) if subset else set(template) | set(stored)
        for name in sorted(names):
            if name not in stored:
                out.append(f"{item}/{name}: not in the checkpoint, requested {template[name]}")
            elif name not in template:
                out.append(f"{item}/{name}: stored {stored[name]}, not in the requested state")
            elif template[name] != stored[name]:
                out.append(f"{item}/{name}: stored {stored[name]}, requested {template[name]}")
    return out


def _check_no_empty_files(manager: ocp.CheckpointManager, directory: str, step: int,
                          items: Sequence[str]) -> None:
    """A clear error for an item with an empty file (a truncated manifest or data file),
    before Orbax reads it: its readers fail in background tasks that print tracebacks
    long after the error has been raised."""
    for item in items:
        for root, _, files in os.walk(os.path.join(directory, str(step), item)):
            empty = [name for name in files if os.path.getsize(os.path.join(root, name)) == 0]
            if empty:
                path = os.path.relpath(os.path.join(root, empty[0]), directory)
                raise _corrupt(directory, step, f"empty file {path}", None,
                               manager.all_steps())


def _restore_items(manager: ocp.CheckpointManager, directory: str, step: int,
                   meta: dict[str, Any], targets: dict[str, dict[str, Any]],
                   partial: bool = False) -> dict[str, Any]:
    """Read the array items `targets` ({item: {name: array or abstract array}}, only
    some of each item's arrays when `partial`) and check their checksums."""
    targets = {item: {n: _abstract(x) for n, x in arrays.items()}
               for item, arrays in targets.items() if arrays}
    _check_no_empty_files(manager, directory, step, sorted(targets))
    ocp = _orbax()
    args = {item: ocp.args.PyTreeRestore(
        arrays, restore_args=ocp.checkpoint_utils.construct_restore_args(arrays),
        partial_restore=partial) for item, arrays in targets.items()}
    try:
        restored = manager.restore(step, args=ocp.args.Composite(**args)) if args else {}
        restored = {item: dict(restored[item]) for item in targets}
    except Exception as e:  # noqa: BLE001 - any failure to read is reported as corruption
        raise _corrupt(directory, step, f"cannot read {sorted(targets)}", e,
                       manager.all_steps()) from e
    for item, arrays in restored.items():
        expected = {name: meta["checksums"][item][name] for name in arrays}
        found = _checksums(arrays)
        bad = sorted(name for name in arrays if found[name] != expected[name])
        if bad:
            raise _corrupt(directory, step, f"checksum mismatch in {item}: {bad[:5]}"
                           + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""), None,
                           manager.all_steps())
    return restored


def restore(directory: str | os.PathLike, step: int | None = None, *,
            config: SACConfig | None = None, like: Any = None) -> tuple[Any, SACConfig]:
    """Read checkpoint `step` (env steps; the newest when None) of `directory`.

    like: a TrainState to restore into (same structure and shapes, e.g. a fresh state;
        with a leading seed axis for several seeds). Without it the template is built
        from the stored config (and seed axis).
    config: the config the caller wants to continue with; when it differs from the
        stored one in a way that changes the arrays (see `config_differences`) this
        raises ValueError listing every difference. Other fields may differ.

    Returns (TrainState, the stored SACConfig). A checkpoint saved without its replay
    buffer gives the template's (empty) buffer, with a warning. Errors:
    FileNotFoundError when the step does not exist, CorruptCheckpointError when it
    cannot be read back bit for bit, ValueError when it does not fit `config`/`like`.
    """
    directory = _check_directory(directory, "restore")
    step, _ = _resolve_step(directory, step, "restore")
    manager = _manager(directory)
    try:
        stored_config, meta = _read_json(manager, directory, step)
        where = f"checkpoint step {step} in {directory}"
        if config is not None:
            differences = config_differences(stored_config, config, meta)
            if differences:
                raise ValueError(f"{where} does not match the requested config:\n  "
                                 + "\n  ".join(differences))
        if like is None:
            template = _init_template(stored_config, meta)
        else:
            seed_axis, num_seeds = _seed_axis(like)
            if (seed_axis, num_seeds) != (meta["seed_axis"], meta["num_seeds"]):
                raise ValueError(
                    f"{where} does not match the requested state: num_seeds: stored "
                    f"{meta['num_seeds'] if meta['seed_axis'] else 'no seed axis'}, requested "
                    f"{num_seeds if seed_axis else 'no seed axis'}")
            template = _storable(like)
        items, order, treedef = _named_leaves(template)
        wanted = [item for item in ARRAY_ITEMS if item != "buffer" or meta["buffer_saved"]]
        differences = _shape_differences(items, meta, wanted)
        if differences:
            raise ValueError(f"{where} does not match the requested state (name: shape, "
                             "dtype):\n  " + "\n  ".join(differences))
        restored = _restore_items(manager, directory, step, meta,
                                  {item: items.get(item, {}) for item in wanted})
    finally:
        manager.close()
    if not meta["buffer_saved"] and items.get("buffer"):
        warnings.warn(f"{where} was saved without its replay buffer "
                      "(checkpoint_buffer=False): the restored state has an empty buffer",
                      stacklevel=2)
        concrete = like is not None and all(
            isinstance(x, jax.Array) for x in jax.tree.leaves(like.buffer))
        buffer = like.buffer if concrete else _empty_buffer(stored_config, meta)
        restored["buffer"] = _named_leaves(_storable(
            template.replace(buffer=buffer)))[0]["buffer"]
    state = jax.tree_util.tree_unflatten(treedef, [restored[item][name] for item, name in order])
    if meta["key_impl"] is not None:
        state = state.replace(key=jax.random.wrap_key_data(state.key, impl=meta["key_impl"]))
    return state, stored_config


# --- the actor alone (load_policy) -------------------------------------------------


class StoredActor(NamedTuple):
    """What acting needs from one checkpoint step (see `restore_actor`).

    config: the stored SACConfig. step: its env steps. actor_params: one module's actor
    parameters (no seed or module axis). obs_stats: its observation statistics.
    meta: the stored env metadata (obs_shape, obs_dim, backend, and the action space:
    act_dim, act_shape, act_low, act_high for a Box; act_kind, act_dim, act_start for
    a Discrete space).
    """

    config: SACConfig
    step: int
    actor_params: Any
    obs_stats: Any
    meta: dict[str, Any]


def restore_actor(directory: str | os.PathLike, step: int | None = None, *,
                  seed_index: int = 0, module_id: int = 0) -> StoredActor:
    """One module's actor parameters and observation statistics from checkpoint `step`
    (the newest when None), with the stored config and env metadata.

    Reads only the actor's parameters and the statistics (never the replay buffer). For
    a checkpoint of several seeds, `seed_index` picks one; for a multi-agent run with
    independent modules, `module_id` picks one module (agent `module_id`'s; the only
    module, 0, otherwise).
    """
    directory = _check_directory(directory, "load_policy")
    step, _ = _resolve_step(directory, step, "load_policy")
    manager = _manager(directory)
    try:
        config, meta = _read_json(manager, directory, step)
        seeds = meta["num_seeds"] if meta["seed_axis"] else 1
        where = f"checkpoint step {step} in {directory}"
        if not checks.is_int(seed_index) or not 0 <= seed_index < seeds:
            checks.fail("load_policy", "seed_index", seed_index,
                        f"in [0, {seeds}): {where} holds {seeds} seed(s)")
        if not checks.is_int(module_id) or not 0 <= module_id < config.num_modules:
            checks.fail("load_policy", "module_id", module_id,
                        f"in [0, {config.num_modules}): {where} holds "
                        f"{config.num_modules} module(s)")
        template = _init_template(config, meta)
        items, _, _ = _named_leaves(template)
        wanted = {"learner": {n: x for n, x in items["learner"].items()
                              if n.startswith("actor_params.")}}
        stats_prefix = "obs_norm." if meta["backend"] == "jax" else ""
        wanted["runner"] = {n: x for n, x in items.get("runner", {}).items()
                            if n.startswith(stats_prefix)}
        differences = _shape_differences(wanted, meta, list(wanted), subset=True)
        if differences:
            raise ValueError(f"checkpoint step {step} in {directory} does not fit its config:"
                             "\n  " + "\n  ".join(differences))
        restored = _restore_items(manager, directory, step, meta, wanted, partial=True)
    finally:
        manager.close()
    pick = (lambda x: x[seed_index]) if meta["seed_axis"] else (lambda x: x)
    pick_module = (lambda x: pick(x)[module_id]) if config.num_modules > 1 else pick
    actor = _unflatten_subtree(template.learner.actor_params, restored["learner"],
                               "actor_params.", pick_module)
    if restored.get("runner"):
        stats_template = template.runner.obs_norm if stats_prefix else template.runner
        stats = _unflatten_subtree(stats_template, restored["runner"], stats_prefix, pick)
    else:
        if config.normalize_obs:
            warnings.warn(f"checkpoint step {step} in {directory} has no observation "
                          "statistics (saved without a runner state) although "
                          "normalize_obs=True: the policy sees unnormalized observations",
                          stacklevel=3)
        stats = connectors.init_obs_norm(meta["obs_dim"])
    return StoredActor(config, step, actor, stats, meta)


def _unflatten_subtree(template: Any, arrays: dict[str, Any], prefix: str,
                       pick: Callable[[Any], Any]) -> Any:
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [prefix + ".".join(_key_name(e) for e in path) for path, _ in paths]
    return jax.tree_util.tree_unflatten(treedef, [pick(arrays[n]) for n in names])
