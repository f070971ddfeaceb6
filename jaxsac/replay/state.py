"""The replay buffer's state and interfaces, shared by every buffer in this package:
`ReplayState`, `ReplayBuffer` (the functions every buffer has) and `StartSampler` (how
the episode buffer draws start rows: uniformly or by priority).

Row layout: C = capacity rows, E = num_envs; each env owns a time-ordered ring of C // E
slots and the flat row of env e at slot s is s * E + e. A row's `flags` byte holds
TERMINATED, TRUNCATED, RESET (a reset row: never the start of a transition), FAILED
(the env raised instead of stepping: never a start, and n-step walks stop before it)
and STACK_CUT (its frame stack would need an overwritten frame: never a start;
jaxsac.replay.frames).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxsac.types import Batch, Step

TERMINATED = 1
TRUNCATED = 2
RESET = 4
FAILED = 8
STACK_CUT = 16
DONE = TERMINATED | TRUNCATED
NOT_A_START = RESET | FAILED | STACK_CUT


@struct.dataclass
class ReplayState:
    """The buffer's state (a pytree). C = capacity, E = num_envs, row = slot * E + env.

    obs: [C, *obs_shape] the observation each step was taken from (an observation tree:
        [C, *shape] for each leaf, in the leaf's dtype).
    action: [C, *act_shape].
    reward: [C] float32.
    flags: [C] uint8, bit 0 terminated, bit 1 truncated, bit 2 reset row (not a start),
        bit 3 failed row (not a start, and no walk passes into it), bit 4 stack cut
        (not a start: its frame stack lost a frame).
    last_next_obs: [E, *obs_shape] the observation after each env's newest row (a tree
        like obs).
    write_slot: [] int32, the ring slot the next `add` writes.
    filled_slots: [] int32, slots written so far (at most C // E).
    num_valid: [] int32, rows that are valid starts (written, not reset rows).
    priority_sums: tree levels of p^alpha, leaves first, level l of shape
        [rows_l, TREE_ARITY]; () when sampling uniformly.
    priority_mins: the same levels holding the min (+inf where no valid row).
    max_priority: [] float32, p_max (raw |td| + eps, not raised to alpha).
    priority_updates: [] int32, calls of `update_priorities` (drives the beta schedule).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    flags: jax.Array
    last_next_obs: Any
    write_slot: jax.Array
    filled_slots: jax.Array
    num_valid: jax.Array
    priority_sums: tuple[jax.Array, ...]
    priority_mins: tuple[jax.Array, ...]
    max_priority: jax.Array
    priority_updates: jax.Array


class ReplayBuffer(NamedTuple):
    """The pure functions of an episode replay buffer (see `episode_buffer`)."""

    init: Callable[[Step], ReplayState]
    add: Callable[[ReplayState, Step], ReplayState]
    sample: Callable[[ReplayState, jax.Array], Batch]
    update_priorities: Callable[[ReplayState, jax.Array, jax.Array], ReplayState]
    can_sample: Callable[[ReplayState], jax.Array]


class StartSampler(NamedTuple):
    """How an episode buffer draws start rows and keeps priorities: `uniform_sampler` or
    `prioritized_sampler`, chosen once when the buffer is built. C = capacity, E =
    num_envs, B = batch_size, W = `words_per_sample`.

    empty_trees() -> (priority_sums, priority_mins) of an empty `ReplayState`.
    add_priorities(state, rows [E] int32, not_a_start [E] bool) -> state with the
        priorities of the rows `add` just wrote.
    words_per_sample: uint32 words `draw_starts` takes per sample.
    draw_words(key, shape) -> uint32 words of `shape` (`jax.random.bits`'s words).
    draw_starts(state, words [B, W] uint32, key, can_sample [] bool) -> (start rows [B]
        int32, importance weights [B] float32); `key` seeds any further draws.
    update_priorities(state, indices [B] int32, td_error [B] float32) -> state.
    drop_starts(state, rows [M] int32 (distinct), drop [M] bool) -> state with the rows
        where `drop` no longer drawn (their priorities 0); others unchanged.
    """

    empty_trees: Callable[[], tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]]
    add_priorities: Callable[[ReplayState, jax.Array, jax.Array], ReplayState]
    words_per_sample: int
    draw_words: Callable[[jax.Array, tuple[int, ...]], jax.Array]
    draw_starts: Callable[[ReplayState, jax.Array, jax.Array, jax.Array],
                          tuple[jax.Array, jax.Array]]
    update_priorities: Callable[[ReplayState, jax.Array, jax.Array], ReplayState]
    drop_starts: Callable[[ReplayState, jax.Array, jax.Array], ReplayState]


def end_episodes(state: ReplayState, num_envs: int) -> ReplayState:
    """`state` with each env's newest row marked TRUNCATED unless it ended its episode
    already: the episodes that were running stop at their last stored step, whose next
    observation stays `last_next_obs`, and the next row of each env is a reset row. For
    a run whose envs restart (a resumed gymnasium run), before its first new row, which
    must be a NEXT_STEP reset row from `last_next_obs` (`GymRunner.resume_from`).
    One buffer of `num_envs` envs (no shard or module axis); unchanged when empty."""
    ring = state.flags.shape[0] // num_envs
    newest = (state.write_slot - 1) % ring * num_envs + jnp.arange(num_envs)
    flags = state.flags[newest]
    running = (state.filled_slots > 0) & ((flags & DONE) == 0)
    ended = jnp.where(running, flags | TRUNCATED, flags).astype(state.flags.dtype)
    return state.replace(flags=state.flags.at[newest].set(ended))
