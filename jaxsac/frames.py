"""Frame stacks for acting: the last k frames of each env's running episode.

A run with `frame_stack` k > 1 stores each frame once (the replay buffer builds the
stacks of sampled transitions, jaxsac.replay.frames); the policy acts on the same
stacks, which the runners and evaluation keep with `FrameStack`:

    frames = FrameStack(spec, k)
    stack = frames.start(obs)                  # [E, ...]: each image its first frame k times
    stack = frames.push(stack, next_obs, new)  # drop the oldest frame, append the newest;
                                               # where new [E] is True, start again

An image entry [H, W, C] uint8 (`observations.is_image`) is stacked along its channels,
[H, W, C·k], the oldest frame first; other entries (vectors) are not stacked: the stack
holds their newest value. With k = 1 both functions return the observation itself. They
take the observation trees of `spec` (`ObsSpec.from_env`'s) or their packed float32
columns (`ObsSpec.pack`'s; `packed=True`), numpy or JAX arrays, any leading axes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks
from jaxsac.observations import ObsSpec, is_image


def check_frame_stack(owner: str, frame_stack: Any, spec: ObsSpec) -> int:
    """`frame_stack` as an int >= 1, and > 1 only for an observation with an image
    entry; else a ValueError naming `owner`'s field, its value and what is allowed."""
    checks.check_int(owner, "frame_stack", frame_stack, 1)
    if frame_stack > 1 and not spec.has_images:
        checks.fail(owner, "frame_stack", frame_stack,
                    f"1 for the observation {spec.describe()}, which has no image entry "
                    "([H, W, C] uint8) to stack")
    return int(frame_stack)


def _xp(tree: Any) -> Any:
    return np if all(isinstance(x, np.ndarray) for x in jax.tree.leaves(tree)) else jnp


@dataclasses.dataclass(frozen=True)
class FrameStack:
    """The acting stacks of `frame_stack` frames of observations of `spec` (see the
    module docstring). Hashable: a static argument."""

    spec: ObsSpec
    frame_stack: int

    def __post_init__(self):
        check_frame_stack("FrameStack", self.frame_stack, self.spec)

    @property
    def stacked_spec(self) -> ObsSpec:
        """What the policy reads: `spec` with each image [H, W, C·frame_stack]."""
        return self.spec.stacked(self.frame_stack)

    def start(self, obs: Any, packed: bool = False) -> Any:
        """The stacks of first observations obs [*batch, ...]: each image's frame
        repeated frame_stack times along its channels."""
        if self.frame_stack == 1:
            return obs
        tree = self.spec.unpack(obs) if packed else obs
        stack = self._map_images(
            lambda x: _xp(x).concatenate([x] * self.frame_stack, axis=-1), tree)
        return self.stacked_spec.pack(stack, stack_batch_dims(stack, self.stacked_spec)) \
            if packed else stack

    def push(self, stack: Any, obs: Any, new_episode: Any, packed: bool = False) -> Any:
        """The stacks [*batch, ...] after observations obs [*batch, ...]: each image's
        oldest frame dropped and obs's appended; where new_episode [*batch] bool, the
        stack `start(obs)` instead."""
        if self.frame_stack == 1:
            return obs
        tree = self.spec.unpack(obs) if packed else obs
        stack = self.stacked_spec.unpack(stack) if packed else stack

        def shift(old, fresh, new):
            xp = _xp(old)
            shifted = xp.concatenate([old[..., new.shape[-1]:], new], axis=-1)
            where = xp.asarray(new_episode).reshape(
                np.shape(new_episode) + (1,) * (new.ndim - np.ndim(new_episode)))
            return xp.where(where, fresh, shifted)

        tree = self._map_images(shift, stack, self.start(tree), tree)
        return self.stacked_spec.pack(tree, np.ndim(new_episode)) if packed else tree

    def _map_images(self, fn, *trees: Any) -> Any:
        """fn(*entries) of the image entries of `trees` (observation trees of the same
        keys); the last tree's own entries elsewhere."""
        obs = trees[-1]
        if not isinstance(obs, Mapping):
            return fn(*trees) if self.spec.is_image_array else obs
        return {k: fn(*(tree[k] for tree in trees)) if is_image(s, d) else obs[k]
                for k, s, d in self.spec.entries()}


def stack_batch_dims(tree: Any, spec: ObsSpec) -> int:
    """The leading axes of observations of `spec` in `tree`."""
    leaf = jax.tree.leaves(tree)[0]
    return leaf.ndim - len(spec.shapes[0])
