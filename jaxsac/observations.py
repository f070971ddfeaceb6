"""Observations as pytrees: what one stored observation is (`ObsSpec`), decided once from
the env's observation space (`obs_spec`), and the transforms every path shares.

    an image Box          -> the image [H, W, C] uint8 as it is (a Box of rank 3 and
                             dtype uint8)
    any other Box         -> a flat float32 array [dim] (flattened, as it always was)
    a Dict of Boxes       -> a dict {key: [*shape] in the Box's dtype}: each entry keeps
                             its own shape and dtype (uint8 stays uint8)

An image (a leaf [H, W, C] uint8, of a Box or a Dict) can be seen through a frame stack
of k frames (`ObsSpec.stacked`, jaxsac.frames): [H, W, C·k], the oldest frame first.

Runners, the replay buffer (each leaf its own rows), the learner, the policy and
checkpoints carry the observation as that tree; a batch adds leading axes to every leaf.
The flat features of an observation (`flat_features`, the "flat" encoder) are its
leaves flattened to float32 and concatenated in sorted key order, the order gymnasium's
`flatten` gives a Dict space. On the host a tree travels packed into float32 columns in
that same order (`ObsSpec.pack`, `ObsSpec.unpack`: exact for float32 and small
integer entries, uint8 images included).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks

SUPPORTED_OBSERVATIONS = (
    "supported observation spaces: a Box of any shape (an image Box [H, W, C] uint8 kept "
    "as it is, any other flattened to float32), or a Dict whose entries are Boxes (each "
    "entry kept with its shape and dtype)")


def is_image(shape: tuple[int, ...], dtype: Any) -> bool:
    """Whether an entry of one observation of `shape` and `dtype` is an image: rank 3
    (H, W, C) and uint8."""
    return len(shape) == 3 and np.dtype(dtype) == np.uint8


@dataclasses.dataclass(frozen=True)
class ObsSpec:
    """What one stored observation is (hashable: a static argument, a cache key).

    keys: a Dict observation's keys, sorted; None for an array observation.
    shapes, dtypes: each entry's shape and dtype name (one entry, ((dim,),), "float32",
        for a flat observation; ((H, W, C),), "uint8" for an image array).
    """

    keys: tuple[str, ...] | None
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def flat(cls, dim: int) -> ObsSpec:
        """A flat float32 observation [dim]."""
        return cls(None, ((int(dim),),), ("float32",))

    @classmethod
    def image(cls, shape: tuple[int, ...]) -> ObsSpec:
        """An image observation [H, W, C] uint8."""
        return cls(None, (tuple(int(n) for n in shape),), ("uint8",))

    @property
    def is_dict(self) -> bool:
        return self.keys is not None

    @property
    def is_image_array(self) -> bool:
        """An array observation that is one image [H, W, C] uint8 (not a dict)."""
        return not self.is_dict and is_image(self.shapes[0], self.dtypes[0])

    @property
    def has_images(self) -> bool:
        """Whether any entry is an image (what a frame stack stacks)."""
        return any(is_image(s, d) for _, s, d in self.entries())

    def stacked(self, frame_stack: int) -> ObsSpec:
        """The spec of this observation seen through a stack of `frame_stack` frames:
        each image entry [H, W, C] becomes [H, W, C·frame_stack]; other entries stay."""
        shapes = tuple((*s[:2], s[2] * frame_stack) if is_image(s, d) else s
                       for _, s, d in self.entries())
        return dataclasses.replace(self, shapes=shapes)

    @property
    def dim(self) -> int:
        """Entries of the flat features (every leaf's entries, summed)."""
        return sum(math.prod(shape) for shape in self.shapes)

    def entries(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """(key, shape, dtype) of each entry, in sorted key order ("" for a flat one)."""
        return [(k, s, np.dtype(d)) for k, s, d in zip(self.keys or ("",), self.shapes,
                                                        self.dtypes, strict=True)]

    def tree(self) -> Any:
        """One observation's shapes: a jax.ShapeDtypeStruct, or a dict of them."""
        leaves = {k: jax.ShapeDtypeStruct(s, d) for k, s, d in self.entries()}
        return leaves if self.is_dict else leaves[""]

    def zeros(self, batch_shape: tuple[int, ...] = ()) -> Any:
        """Observations of zeros [*batch_shape, ...] (jax arrays)."""
        return jax.tree.map(lambda x: jnp.zeros((*batch_shape, *x.shape), x.dtype),
                            self.tree())

    def float_keys(self) -> tuple[str, ...]:
        """The keys of the floating-point entries (those normalization tracks)."""
        return tuple(k for k, _, d in self.entries() if np.issubdtype(d, np.floating))

    def select(self, keys: tuple[str, ...] | None, owner: str = "ObsSpec.select",
               field: str = "keys") -> ObsSpec:
        """The spec of the entries `keys` (None: all); errors name `owner`'s `field`."""
        if keys is None:
            return self
        if not self.is_dict:
            checks.fail(owner, field, keys, "None: the env's observation is an array, "
                        "not a dict")
        missing = [k for k in keys if k not in self.keys]
        if missing or not keys:
            checks.fail(owner, field, keys, f"a non-empty tuple of the observation's keys "
                        f"{list(self.keys)}" + (f" (no key {missing[0]!r})" if missing else ""))
        kept = [i for i, k in enumerate(self.keys) if k in keys]
        return ObsSpec(tuple(self.keys[i] for i in kept), tuple(self.shapes[i] for i in kept),
                       tuple(self.dtypes[i] for i in kept))

    def from_env(self, obs: Any, batch_dims: int = 1) -> Any:
        """The stored tree of an env's observations with `batch_dims` leading axes:
        a flat observation flattened to float32 [*batch, dim], a dict's entries (only
        this spec's keys) in their dtypes. numpy in, numpy out; JAX likewise."""
        if self.is_image_array:
            return obs.reshape(obs.shape[:batch_dims] + self.shapes[0]).astype(np.uint8)
        if not self.is_dict:
            shape = obs.shape[:batch_dims] + (-1,)
            return obs.reshape(shape).astype(np.float32)
        xp = np if all(isinstance(obs[k], np.ndarray) for k in self.keys) else jnp
        return {k: xp.asarray(obs[k]).astype(d) for k, _, d in self.entries()}

    def pack(self, obs: Any, batch_dims: int = 1) -> Any:
        """Observations [*batch, ...] (this spec's tree) -> float32 columns
        [*batch, dim], entries in sorted key order (numpy or JAX)."""
        if self.is_image_array:
            return obs.reshape(obs.shape[:batch_dims] + (-1,)).astype(np.float32)
        if not self.is_dict:
            return obs
        xp = np if all(isinstance(obs[k], np.ndarray) for k in self.keys) else jnp
        batch = obs[self.keys[0]].shape[:batch_dims]
        return xp.concatenate([xp.reshape(obs[k], (*batch, -1)).astype(np.float32)
                               for k in self.keys], axis=-1)

    def unpack(self, columns: Any) -> Any:
        """float32 columns [..., dim] (`pack`'s) -> observations [..., ...] of this spec
        (numpy or JAX; jittable)."""
        if self.is_image_array:
            return columns.reshape(columns.shape[:-1] + self.shapes[0]).astype(np.uint8)
        if not self.is_dict:
            return columns
        xp = np if isinstance(columns, np.ndarray) else jnp
        sizes = np.cumsum([math.prod(s) for s in self.shapes])[:-1]
        parts = xp.split(columns, sizes, axis=-1)
        return {k: part.reshape((*columns.shape[:-1], *s)).astype(d)
                for (k, s, d), part in zip(self.entries(), parts, strict=True)}

    def metadata(self) -> dict[str, Any]:
        """What a checkpoint stores of the observations (`from_metadata`)."""
        entries = None if not self.is_dict else {
            k: {"shape": list(s), "dtype": d.name} for k, s, d in self.entries()}
        image = list(self.shapes[0]) if self.is_image_array else None
        return {"obs_dim": self.dim, "obs_entries": entries, "obs_image": image}

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> ObsSpec:
        """The spec `metadata()` describes; a checkpoint without `obs_entries` (before
        format 4) held flat observations of `obs_dim` entries; one without `obs_image`
        held no image array."""
        entries = meta.get("obs_entries")
        if meta.get("obs_image") is not None:
            return cls.image(tuple(meta["obs_image"]))
        if entries is None:
            return cls.flat(meta["obs_dim"])
        keys = tuple(sorted(entries))
        return cls(keys, tuple(tuple(entries[k]["shape"]) for k in keys),
                   tuple(entries[k]["dtype"] for k in keys))

    def describe(self) -> str:
        """For messages: "flat [dim]", "image [H, W, C] uint8" or "{key: shape dtype,
        ...}"."""
        if self.is_image_array:
            return f"image {list(self.shapes[0])} uint8"
        if not self.is_dict:
            return f"flat [{self.dim}]"
        return "{" + ", ".join(f"{k!r}: {list(s)} {d.name}" for k, s, d in
                               self.entries()) + "}"


def obs_spec(space: gymnasium.Space | int | ObsSpec, owner: str = "env") -> ObsSpec:
    """The ObsSpec of an observation space: an image Box (rank 3, uint8) -> the image;
    another Box -> flat [flatdim]; a Dict of Boxes -> its entries; an int d -> flat [d].
    Other spaces, and a Dict entry that is not a Box,
    raise ValueError naming the space (and key) and what is supported."""
    if isinstance(space, ObsSpec):
        return space
    if checks.is_int(space):
        return ObsSpec.flat(checks.check_int(owner, "obs_dim", space, 1))
    if isinstance(space, gymnasium.spaces.Box) and is_image(space.shape, space.dtype):
        return ObsSpec.image(space.shape)
    if isinstance(space, gymnasium.spaces.Box):
        return ObsSpec.flat(gymnasium.spaces.flatdim(space))
    if not isinstance(space, gymnasium.spaces.Dict):
        raise ValueError(f"{owner}: observation_space={space} is not supported "
                         f"({type(space).__name__} observations); {SUPPORTED_OBSERVATIONS}")
    if not space.spaces:
        raise ValueError(f"{owner}: observation_space={space} is not supported (a Dict "
                         f"without entries); {SUPPORTED_OBSERVATIONS}")
    for key, entry in space.spaces.items():
        if not isinstance(key, str) or not isinstance(entry, gymnasium.spaces.Box):
            raise ValueError(f"{owner}: observation_space entry {key!r} = {entry} is not "
                             f"supported ({type(entry).__name__}; a Dict's entries must be "
                             f"Boxes with string keys); {SUPPORTED_OBSERVATIONS}")
    keys = tuple(sorted(space.spaces))
    return ObsSpec(keys, tuple(tuple(space[k].shape) for k in keys),
                   tuple(np.dtype(space[k].dtype).name for k in keys))


def flat_features(obs: Any) -> jax.Array:
    """The "flat" encoder: observations [B, ...] -> features [B, F] float32. A flat
    array is its own features (the runners store a non-image Box observation flat
    already), an image array [B, H, W, C] is flattened to float32; a dict's leaves are
    flattened to float32 and concatenated in sorted key order."""
    if not isinstance(obs, Mapping):
        return obs if obs.ndim == 2 else jnp.reshape(obs, (obs.shape[0], -1)).astype(
            jnp.float32)
    leaves = jax.tree.leaves(obs)
    return jnp.concatenate([jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32)
                            for x in leaves], axis=-1)


def select_keys(obs: Any, keys: tuple[str, ...] | None) -> Any:
    """The entries `keys` of a dict observation (all of it when None)."""
    return obs if keys is None else {k: obs[k] for k in keys}


def batch_size(obs: Any) -> int:
    """The leading axis of observations [B, ...] (any tree)."""
    return jax.tree.leaves(obs)[0].shape[0]
