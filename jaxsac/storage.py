"""Pytrees as checksummed Orbax steps: the storage under `jaxsac.checkpoint`.

A step is one Orbax step folder `<directory>/<step>/` holding array items (flat dicts
`{"a.b.c": array}`, one per item name) and JSON items. The JSON item `meta` records,
besides what the caller puts in it, each array's shape and dtype (`arrays`), two 32-bit
checksums per array (`checksums`), the implementation of every typed PRNG key
(`key_impls`) and a SHA-256 of all JSON items (`json_sha256`).

    items, key_impls, order, treedef = flatten(tree, item_of)   # {item: {name: leaf}}
    write_step(directory, step, items, key_impls, meta, {"config": ...}, max_to_keep)
    manager = reader(directory)
    raw = read_json(manager, directory, step, ("config", "meta"), parse)
    arrays = read_arrays(manager, directory, step, raw_meta, targets)
    tree = unflatten(treedef, order, arrays, key_impls)

Zero-size arrays (a MuJoCo state with no contacts) are recorded in `arrays` only and
made again when read. Leaves of an extended dtype (typed PRNG keys, `key<fry>`,
`key<rbg>`, ...) anywhere in the tree are stored as their key data
(`jax.random.key_data`, uint32) and come back as keys of the recorded implementation.
Orbax writes each step into a temporary folder and renames it when complete, so a
killed save leaves earlier steps intact; `complete_steps` lists only finalized steps.
Any failure to read a step back as it was written is a `CorruptCheckpointError` naming
the directory, the step and the steps to fall back to. Nothing here knows what the
arrays mean.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks

if TYPE_CHECKING:
    import orbax.checkpoint as ocp

FINALIZED_MARKER = "_CHECKPOINT_METADATA"
"""The file Orbax writes into a step folder when the step is complete."""

ItemOf = Callable[[list[str]], tuple[str, str]]
"""A leaf's path (its key names) -> (item, name of the leaf within the item)."""


class CorruptCheckpointError(RuntimeError):
    """A checkpoint step that exists but cannot be read back as it was written."""


# --- leaves, names and typed keys ----------------------------------------------------


def key_name(entry: Any) -> str:
    """The name of one pytree path entry (a dict key, attribute or sequence index)."""
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def leaf_name(path: Sequence[Any]) -> str:
    """"a.b.c" for a pytree path."""
    return ".".join(key_name(entry) for entry in path)


def is_typed_key(x: Any) -> bool:
    """A typed PRNG key array (concrete or abstract), e.g. of dtype key<fry>."""
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _stored_leaf(x: Any, where: str) -> tuple[Any, str | None]:
    """(the leaf as stored, its key implementation or None): a typed key [*s] becomes
    its key data [*s, k] (uint32), for an abstract key an abstract array."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return x, None
    if not is_typed_key(x):
        raise ValueError(f"checkpoint: leaf {where} has dtype {dtype}: an extended dtype "
                         "other than a PRNG key cannot be stored")
    if isinstance(x, jax.ShapeDtypeStruct):  # an abstract key: traced to read its impl
        impls: list[str] = []
        data = jax.eval_shape(lambda k: (impls.append(str(jax.random.key_impl(k))),
                                         jax.random.key_data(k))[1], x)
        return data, impls[0]
    return jax.random.key_data(x), str(jax.random.key_impl(x))


def flatten(tree: Any, item_of: ItemOf
            ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]],
                       list[tuple[str, str]], Any]:
    """Split a pytree (concrete or abstract leaves) into named items.

    Returns (items {item: {name: stored leaf}}, key_impls {item: {name: implementation}}
    of the leaves that were typed keys, the (item, name) of each leaf in flattening
    order, treedef).
    """
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    items: dict[str, dict[str, Any]] = {}
    key_impls: dict[str, dict[str, str]] = {}
    order = []
    for path, leaf in leaves_with_paths:
        item, name = item_of([key_name(entry) for entry in path])
        if name in items.setdefault(item, {}):
            raise ValueError(f"checkpoint: two leaves are both named {item}/{name}")
        items[item][name], impl = _stored_leaf(leaf, f"{item}/{name}")
        if impl is not None:
            key_impls.setdefault(item, {})[name] = impl
        order.append((item, name))
    return items, key_impls, order, treedef


def unflatten(treedef: Any, order: Sequence[tuple[str, str]],
              items: dict[str, dict[str, Any]], key_impls: dict[str, dict[str, str]]) -> Any:
    """The pytree of `flatten`'s `treedef` and `order` from stored items, the leaves in
    `key_impls` wrapped back into typed keys of their implementation."""
    def leaf(item: str, name: str) -> Any:
        impl = key_impls.get(item, {}).get(name)
        x = items[item][name]
        return x if impl is None else jax.random.wrap_key_data(x, impl=impl)
    return jax.tree_util.tree_unflatten(treedef, [leaf(item, name) for item, name in order])


def describe(x: Any) -> list[Any]:
    """[shape, dtype name] of an array, as recorded in meta["arrays"]."""
    return [list(np.shape(x)), np.dtype(x.dtype).name]


def shape_differences(items: dict[str, dict[str, Any]], stored: dict[str, dict[str, Any]],
                      wanted: Sequence[str], subset: bool = False) -> list[str]:
    """Lines naming each array whose presence, shape or dtype differs between the
    template `items` and the stored descriptions `stored` (meta["arrays"]); only the
    template's arrays when `subset`."""
    out = []
    for item in wanted:
        template = {name: describe(x) for name, x in items.get(item, {}).items()}
        there = stored.get(item, {})
        names = set(template) if subset else set(template) | set(there)
        for name in sorted(names):
            if name not in there:
                out.append(f"{item}/{name}: not in the checkpoint, requested {template[name]}")
            elif name not in template:
                out.append(f"{item}/{name}: stored {there[name]}, not in the requested state")
            elif template[name] != there[name]:
                out.append(f"{item}/{name}: stored {there[name]}, requested {template[name]}")
    return out


# --- checksums -----------------------------------------------------------------------


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


def checksums(arrays: dict[str, Any]) -> dict[str, list[int]]:
    """{name: [sum of words, position-weighted sum of words]} mod 2**32 of stored arrays
    (no typed keys), computed on the arrays' device (integer sums: the same bits give
    the same value on any backend)."""
    if not arrays:
        return {}
    sums = jax.device_get(_checksums_device(arrays))
    return {name: [int(v) for v in np.asarray(s)] for name, s in sums.items()}


def json_sha256(items: dict[str, dict[str, Any]]) -> str:
    """SHA-256 of JSON items {name: dict} as canonical JSON, without their `json_sha256`
    fields."""
    body = {name: {k: v for k, v in item.items() if k != "json_sha256"}
            for name, item in items.items()}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# --- directories, steps and the Orbax manager ----------------------------------------


def check_directory(directory: Any, owner: str) -> str:
    """`directory` as an absolute path; a ValueError naming `owner` unless a non-empty
    path."""
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        checks.fail(owner, "directory", directory, "a non-empty path")
    return os.path.abspath(os.fspath(directory))


def check_step(step: Any, owner: str) -> int:
    """`step` as an int; a ValueError naming `owner` unless an integer >= 0."""
    if not checks.is_int(step) or step < 0:
        checks.fail(owner, "step", step, "an integer >= 0 (env steps)")
    return int(step)


def orbax():
    """orbax.checkpoint, imported on first use: `import jaxsac` and runs that never save
    or restore do not pay for its import (docs/performance.md)."""
    import orbax.checkpoint

    return orbax.checkpoint


def reader(directory: str) -> ocp.CheckpointManager:
    """A manager that reads `directory`: it creates, deletes and cleans up nothing."""
    ocp = orbax()
    options = ocp.CheckpointManagerOptions(create=False, enable_async_checkpointing=False)
    return ocp.CheckpointManager(directory, options=options)


def complete_steps(directory: str) -> list[int]:
    """Complete steps in `directory`, oldest first ([] when it does not exist): step
    folders Orbax finalized, which it marks with a metadata file (a folder merely named
    like a step is not a checkpoint; a finalized step that was damaged later is listed,
    and reading it is an error)."""
    if not os.path.isdir(directory):
        return []
    manager = reader(directory)
    try:
        steps = manager.all_steps()
    finally:
        manager.close()
    return sorted(s for s in steps
                  if os.path.isfile(os.path.join(directory, str(s), FINALIZED_MARKER)))


def resolve_step(directory: str, step: int | None, owner: str) -> int:
    """`step`, or the newest complete step when None; FileNotFoundError naming the
    directory (and the steps there) when it is not a complete step."""
    steps = complete_steps(directory)
    if step is None:
        if not steps:
            raise FileNotFoundError(f"{owner}: no checkpoint in {directory} "
                                    f"({'empty' if os.path.isdir(directory) else 'no such'} "
                                    "directory)")
        return steps[-1]
    step = check_step(step, owner)
    if step not in steps:
        raise FileNotFoundError(f"{owner}: no checkpoint step {step} in {directory}; "
                                f"steps there: {steps}")
    return step


def corrupt(directory: str, step: int, what: str, error: BaseException | None,
            others: Sequence[int]) -> CorruptCheckpointError:
    """The error for step `step` of `directory` that cannot be read (`what`, caused by
    `error`), naming the `others` steps to fall back to."""
    older = [s for s in others if s != step]
    hint = (f"; other steps there: {older} (restore one with step=..., or delete "
            f"{os.path.join(directory, str(step))} to resume from the newest of them)"
            if older else "; there is no other step to fall back to")
    lines = str(error).strip().splitlines() or [""]
    message = lines[0][:300] + (" ..." if len(lines) > 1 or len(lines[0]) > 300 else "")
    cause = f": {type(error).__name__}: {message}" if error is not None else ""
    return CorruptCheckpointError(
        f"checkpoint step {step} in {directory} is corrupt or incomplete ({what}){cause}{hint}")


# --- writing -------------------------------------------------------------------------


def write_step(directory: str, step: int, items: dict[str, dict[str, Any]],
               key_impls: dict[str, dict[str, str]], meta: dict[str, Any],
               json_items: dict[str, dict[str, Any]], max_to_keep: int) -> None:
    """Write step `step` of `directory` atomically: the array `items` ({item: {name:
    array}}, as from `flatten`), the JSON item "meta" (`meta` plus the arrays' shapes,
    checksums, `key_impls` and the JSON hash) and the other `json_items`.

    Keeps the newest `max_to_keep` steps and removes unfinished ones. A step that
    exists is replaced, unless its arrays are the same bits (then nothing is written).
    """
    nonempty = _nonempty(items)
    meta = {**meta,
            "arrays": {item: {name: describe(x) for name, x in arrays.items()}
                       for item, arrays in items.items()},
            "checksums": {item: checksums(arrays) for item, arrays in nonempty.items()},
            "key_impls": key_impls}
    meta["json_sha256"] = json_sha256({**json_items, "meta": meta})
    ocp = orbax()
    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
        cleanup_tmp_directories=True))
    try:
        if step in manager.all_steps():
            if _stored_bits(manager, directory, step) == (meta["checksums"], key_impls):
                return
            manager.delete(step)
        args = {item: ocp.args.StandardSave(arrays) for item, arrays in nonempty.items()}
        args.update({name: ocp.args.JsonSave(value)
                     for name, value in {**json_items, "meta": meta}.items()})
        manager.save(step, args=ocp.args.Composite(**args), force=True)
        manager.wait_until_finished()
    finally:
        manager.close()


def _nonempty(items: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The items without their zero-size arrays (Orbax stores none; meta["arrays"]
    records their shapes and `read_arrays` makes them), and without items left empty."""
    out = {item: {name: x for name, x in arrays.items() if np.size(x)}
           for item, arrays in items.items()}
    return {item: arrays for item, arrays in out.items() if arrays}


def _stored_bits(manager: ocp.CheckpointManager, directory: str, step: int) -> Any:
    """(checksums, key_impls) of an existing step; None when its meta is unreadable."""
    try:
        meta = read_json(manager, directory, step, ("meta",))["meta"]
        return meta["checksums"], meta.get("key_impls")
    except (CorruptCheckpointError, KeyError, TypeError):
        return None


# --- reading -------------------------------------------------------------------------


def read_json(manager: ocp.CheckpointManager, directory: str, step: int,
              names: Sequence[str], parse: Callable[[dict[str, Any]], Any] = lambda x: x
              ) -> Any:
    """parse({name: JSON item}) for the JSON items `names` of step `step`; any failure
    to read or parse them is a CorruptCheckpointError."""
    ocp = orbax()
    try:
        stored = manager.restore(step, args=ocp.args.Composite(
            **{name: ocp.args.JsonRestore() for name in names}))
        return parse({name: stored[name] for name in names})
    except Exception as e:  # noqa: BLE001 - any failure to read is reported as corruption
        raise corrupt(directory, step, f"{' or '.join(names)} item unreadable", e,
                      manager.all_steps()) from e


def _abstract(x: Any) -> jax.ShapeDtypeStruct:
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)


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
                raise corrupt(directory, step, f"empty file {path}", None, manager.all_steps())


def read_arrays(manager: ocp.CheckpointManager, directory: str, step: int,
                meta: dict[str, Any], targets: dict[str, dict[str, Any]],
                partial: bool = False) -> dict[str, dict[str, Any]]:
    """Read the array items `targets` ({item: {name: stored leaf, concrete or abstract;
    its sharding is kept}}, only some of each item's arrays when `partial`) of step
    `step` and check them against `meta["checksums"]`. Zero-size arrays are made, not
    read."""
    empty = {item: {n: jnp.zeros(np.shape(x), x.dtype, device=_abstract(x).sharding)
                    for n, x in arrays.items() if not np.size(x)}
             for item, arrays in targets.items()}
    targets = {item: {n: _abstract(x) for n, x in arrays.items()}
               for item, arrays in _nonempty(targets).items()}
    _check_no_empty_files(manager, directory, step, sorted(targets))
    ocp = orbax()
    args = {item: ocp.args.PyTreeRestore(
        arrays, restore_args=ocp.checkpoint_utils.construct_restore_args(arrays),
        partial_restore=partial) for item, arrays in targets.items()}
    try:
        restored = manager.restore(step, args=ocp.args.Composite(**args)) if args else {}
        restored = {item: dict(restored[item]) for item in targets}
    except Exception as e:  # noqa: BLE001 - any failure to read is reported as corruption
        raise corrupt(directory, step, f"cannot read {sorted(targets)}", e,
                      manager.all_steps()) from e
    for item, arrays in restored.items():
        expected = meta["checksums"][item]
        found = checksums(arrays)
        bad = sorted(name for name in arrays if found[name] != expected[name])
        if bad:
            raise corrupt(directory, step, f"checksum mismatch in {item}: {bad[:5]}"
                          + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""), None,
                          manager.all_steps())
    return {item: {**restored.get(item, {}), **arrays} for item, arrays in empty.items()
            if arrays or item in restored}
