"""Frame stacks built at sample time: each frame is stored once, in its step's row, and
a sampled observation's image entries are the last k frames of its episode.

The stack of row t (env e) is the frames of rows t-k+1, ..., t of e's ring, oldest first,
concatenated along the channels ([H, W, C·k]); going back stops at the first row of the
episode (the row after a reset row) and at the oldest stored row, and the stack then
repeats the earliest frame reached. So an episode's first steps repeat its first frame,
and a stack never crosses an episode boundary. The next observation of a transition is
stacked the same way from the row after its last step (or the env's `last_next_obs`).

A row whose stack would need an overwritten frame is never a start: when `add`
overwrites a row, the k-1 rows after it that reach back to it in the same episode are
marked STACK_CUT (`cut_stacks`). A valid start row's stack, and the stack of its next
observation, therefore hold only stored frames of its own episode.

Only image leaves (rows [C, H, W, C_img] uint8) are stacked; other leaves are the
row's own. B = batch, k = frame_stack, E = num_envs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxsac.replay.state import NOT_A_START, RESET, STACK_CUT, ReplayState, StartSampler


def is_image_rows(rows: jax.Array) -> bool:
    """Whether a stored leaf [C, ...] holds images ([C, H, W, C_img] uint8)."""
    return rows.ndim == 4 and rows.dtype == jnp.uint8


def oldest_slot(state: ReplayState, ring: int) -> jax.Array:
    """[] int32: the ring slot of each env's oldest stored row."""
    return jnp.where(state.filled_slots == ring, state.write_slot, 0)


def stack_rows(state: ReplayState, top_slot: jax.Array, env: jax.Array, num_envs: int,
               frame_stack: int, free_first_step: bool) -> jax.Array:
    """Rows [B, k] of the frames of the stacks topped by slots top_slot [B] of envs env
    [B], oldest first. A step back from slot s to s-1 is taken unless s is the oldest
    stored slot or row s-1 is a reset row (s starts an episode); once one is refused,
    the earliest row reached repeats. `free_first_step`: the first step back is always
    taken (the top of a next observation: the step after a transition's last row)."""
    ring = state.flags.shape[0] // num_envs
    oldest = oldest_slot(state, ring)
    rows = [top_slot * num_envs + env]
    slot, going = top_slot, jnp.ones(top_slot.shape, bool)
    for j in range(1, frame_stack):
        previous = (slot - 1) % ring
        previous_row = previous * num_envs + env
        if not (free_first_step and j == 1):
            going = going & (slot != oldest) & ((state.flags[previous_row] & RESET) == 0)
        rows.append(jnp.where(going, previous_row, rows[-1]))
        slot = previous
    return jnp.stack(rows[::-1], axis=1)


def frames_to_channels(frames: jax.Array) -> jax.Array:
    """frames [B, k, H, W, C] -> [B, H, W, k·C], frame j in channels j·C ... j·C + C-1."""
    batch, k, height, width, channels = frames.shape
    return jnp.moveaxis(frames, 1, 3).reshape(batch, height, width, k * channels)


def stacked_obs(stored: Any, rows: jax.Array, top: Any) -> Any:
    """The observations [B, ...] of stacks of `rows` [B, k] (`stack_rows`): each image
    leaf of `stored` [C, ...] its frames along the channels, with the newest frame
    taken from `top` (the observation tree [B, ...] of the stacks' top rows, e.g. a next
    observation from `last_next_obs`); other leaves `top`'s."""
    def leaf(stored_rows, top_leaf):
        if not is_image_rows(stored_rows):
            return top_leaf
        frames = stored_rows[rows].at[:, -1].set(top_leaf)
        return frames_to_channels(frames)
    return jax.tree.map(leaf, stored, top)


def cut_stacks(state: ReplayState, slot: jax.Array, overwritten_flags: jax.Array,
               was_full: jax.Array, num_envs: int, frame_stack: int,
               sampler: StartSampler) -> ReplayState:
    """`state` after `add` wrote ring slot `slot` over older rows (`was_full`; their
    flags overwritten_flags [E]): the valid rows of slots slot+1 ... slot+k-1 whose
    stacks reached back to the overwritten row (no episode started in between) are
    marked STACK_CUT, leave `num_valid` and the sampler's priorities."""
    ring = state.flags.shape[0] // num_envs
    env = jnp.arange(num_envs, dtype=jnp.int32)
    later = jnp.stack([(slot + j) % ring * num_envs + env for j in range(1, frame_stack)])
    flags = state.flags[later]  # [k-1, E]
    starts_after = (jnp.concatenate([overwritten_flags[None], flags[:-1]]) & RESET) != 0
    reached = ~jnp.cumsum(starts_after, axis=0).astype(bool)
    cut = reached & was_full & ((flags & NOT_A_START) == 0)
    state = state.replace(
        flags=state.flags.at[later].set(jnp.where(cut, flags | STACK_CUT, flags)),
        num_valid=(state.num_valid - jnp.sum(cut)).astype(jnp.int32))
    return sampler.drop_starts(state, later.reshape(-1), cut.reshape(-1))
