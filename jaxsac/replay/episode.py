"""The episode replay buffer: each env step stored once, n-step transitions built at sample time.

`episode_buffer(...)` returns a `ReplayBuffer`, a NamedTuple of five pure functions
(`init, add, sample, update_priorities, can_sample`) in the style of optax's
GradientTransformation: the module-level functions below, bound to the buffer's static
settings with `functools.partial`, as flashbax does. The state is a `ReplayState`
pytree; every function is `jit`-, `vmap`- and `scan`-able, and all randomness comes from
the key passed to `sample`. How start rows are drawn is a `StartSampler`, chosen once
here: `uniform_sampler` or `prioritized_sampler`.

Storage. Each of the `num_envs` envs owns a time-ordered ring of `capacity // num_envs`
slots; all envs advance in lockstep, so one `add` writes one slot of every ring. The
flat row of env `e` at slot `s` is `s * num_envs + e` (these are `Batch.indices`). A row
holds one observation (a pytree: every leaf its own rows), one action, the reward and
a byte of flags (terminated,
truncated, reset row); the observation after a row is the observation of the next row
of the same env, and for each env's newest row it is kept aside in `last_next_obs`.
With gymnasium's NEXT_STEP autoreset the row after an episode's last step is the reset
row: its observation is the episode's final observation, and it is never the start of
a transition. A row is marked as a reset row when it is written, because the previous
row of its env was terminated or truncated (the first row of each env after `init` is a
normal row).

n-step transitions (docs/semantics.md, "n-step transitions"): from a start row t and an
n drawn uniformly from {n_min, ..., n_max}, walk forward and stop after a terminated or
truncated step, after the newest stored step, or after n steps; with k the steps taken,
reward = sum_{i<k} gamma^i r_{t+i}, next_obs = the observation after step t+k-1,
discount = 0 if step t+k-1 terminated else gamma^k, n_step = k. The walk never crosses
an episode boundary and never reaches an overwritten row (it only moves toward newer
rows and stops at the newest). See docs/replay.md for a worked example.

C = capacity, E = num_envs, B = batch_size.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxsac import checks
from jaxsac.replay.frames import cut_stacks
from jaxsac.replay.n_step import n_step_batch
from jaxsac.replay.prioritized import prioritized_sampler
from jaxsac.replay.state import (
    DONE,
    FAILED,
    NOT_A_START,
    RESET,
    TERMINATED,
    TRUNCATED,
    ReplayBuffer,
    ReplayState,
    StartSampler,
)
from jaxsac.replay.uniform import uniform_sampler
from jaxsac.replay.validation import (
    check_example_step,
    check_frame_stack,
    check_settings,
    check_step,
)
from jaxsac.types import Batch, Step


def init(example_step: Step, *, capacity: int, num_envs: int,
         sampler: StartSampler, frame_stack: int = 1) -> ReplayState:
    """An empty buffer of C rows for steps shaped like `example_step` (one unbatched
    Step): obs [C, *obs_shape] (each leaf of an observation tree its own rows, in its
    own dtype), action [C, *act_shape], and the sampler's empty trees."""
    check_example_step(example_step, frame_stack)
    action = jnp.asarray(example_step.action)
    priority_sums, priority_mins = sampler.empty_trees()

    def rows(leaf: Any, count: int) -> jax.Array:
        leaf = jnp.asarray(leaf)
        return jnp.zeros((count, *leaf.shape), leaf.dtype)

    return ReplayState(
        obs=jax.tree.map(lambda x: rows(x, capacity), example_step.obs),
        action=jnp.zeros((capacity, *action.shape), action.dtype),
        reward=jnp.zeros((capacity,), jnp.float32),
        flags=jnp.zeros((capacity,), jnp.uint8),
        last_next_obs=jax.tree.map(lambda x: rows(x, num_envs), example_step.obs),
        write_slot=jnp.int32(0),
        filled_slots=jnp.int32(0),
        num_valid=jnp.int32(0),
        priority_sums=priority_sums,
        priority_mins=priority_mins,
        max_priority=jnp.float32(1.0),
        priority_updates=jnp.int32(0),
    )


def _row_flags(step: Step, is_reset: jax.Array) -> tuple[jax.Array, jax.Array, Any]:
    """(flags [E] uint8, not_a_start [E] bool, failed [E] bool or None) of the rows
    `step` writes; is_reset [E]: the env's previous row ended its episode."""
    flags = (jnp.asarray(step.terminated, bool).astype(jnp.uint8) * TERMINATED
             | jnp.asarray(step.truncated, bool).astype(jnp.uint8) * TRUNCATED
             | is_reset.astype(jnp.uint8) * RESET)
    failed = getattr(step, "failed", None)
    if failed is None:
        return flags, is_reset, None
    failed = jnp.asarray(failed, bool)
    return flags | failed.astype(jnp.uint8) * FAILED, is_reset | failed, failed


def _write_rows(buffer: jax.Array, values: Any, first_row: jax.Array) -> jax.Array:
    """`buffer` [C, ...] with values [E, ...] written at rows first_row .. first_row + E - 1."""
    values = jnp.asarray(values, buffer.dtype)
    start = (first_row,) + (0,) * (buffer.ndim - 1)
    return jax.lax.dynamic_update_slice(buffer, values, start)


def _end_before_failures(flags: jax.Array, failed: jax.Array | None, newest_rows: jax.Array,
                         newest_flags: jax.Array, any_written: jax.Array,
                         ring: int) -> jax.Array:
    """flags [C] with TRUNCATED set on the previous row of every env whose new row
    failed (failed [E] bool): its episode ends there. Unchanged when no row can fail
    (`failed` None) or when each env's ring holds one row (the previous row is the one
    just written)."""
    if failed is None or ring == 1:
        return flags
    ends = failed & any_written
    return flags.at[newest_rows].set(
        jnp.where(ends, newest_flags | TRUNCATED, newest_flags).astype(flags.dtype))


def add(state: ReplayState, step: Step, *, num_envs: int,
        sampler: StartSampler, frame_stack: int = 1) -> ReplayState:
    """Appends one step per env (`step` fields have leading axis E). O(E log C).

    A row whose env's previous row was terminated or truncated is stored as a reset
    row (never a start). A failed row (`step.failed`) is never a start either, and
    it marks its env's previous row truncated: the episode ends at its last real
    step, bootstrapping from that step's real next observation (the failed row's
    obs). New valid rows get priority p_max^alpha when prioritized. With frame_stack
    k > 1, the rows whose frame stacks lose a frame to this write stop being starts
    (`frames.cut_stacks`).
    """
    check_step(state, step, num_envs)
    ring = state.flags.shape[0] // num_envs
    slot = state.write_slot
    first_row = slot * num_envs
    rows = first_row + jnp.arange(num_envs, dtype=jnp.int32)
    # One gather for both reads, and part of it feeds the new flags: that orders the
    # read before the in-place write, so XLA does not copy the whole flags array.
    newest_rows = (slot - 1) % ring * num_envs + jnp.arange(num_envs, dtype=jnp.int32)
    old_flags = state.flags[jnp.concatenate([newest_rows, rows])]
    newest_flags, overwritten_flags = old_flags[:num_envs], old_flags[num_envs:]
    old_filled = state.filled_slots
    is_reset = (state.filled_slots > 0) & ((newest_flags & DONE) != 0)
    overwritten_valid = jnp.where(state.filled_slots == ring,
                                  jnp.sum((overwritten_flags & NOT_A_START) == 0), 0)
    flags, not_a_start, failed = _row_flags(step, is_reset)
    state = state.replace(
        obs=jax.tree.map(lambda rows, x: _write_rows(rows, x, first_row), state.obs,
                         step.obs),
        action=_write_rows(state.action, step.action, first_row),
        reward=_write_rows(state.reward, step.reward, first_row),
        flags=_end_before_failures(_write_rows(state.flags, flags, first_row), failed,
                                   newest_rows, newest_flags, state.filled_slots > 0, ring),
        last_next_obs=jax.tree.map(lambda old, x: jnp.asarray(x, old.dtype),
                                   state.last_next_obs, step.next_obs),
        write_slot=(slot + 1) % ring,
        filled_slots=jnp.minimum(state.filled_slots + 1, ring),
        num_valid=(state.num_valid - overwritten_valid
                   + jnp.sum(~not_a_start)).astype(jnp.int32),
    )
    state = sampler.add_priorities(state, rows, not_a_start)
    if frame_stack == 1:
        return state
    return cut_stacks(state, slot, overwritten_flags, old_filled == ring, num_envs,
                      frame_stack, sampler)


def drawn_n(words: jax.Array, n_min: int, n_max: int) -> jax.Array:
    """n [B] int32 uniform on {n_min, ..., n_max} from words [B] uint32, as n_min + word
    mod (n_max - n_min + 1): each n's probability is off by at most
    (n_max - n_min + 1) / 2^32 relative (as with one 32-bit word in any method)."""
    return n_min + (words % jnp.uint32(n_max - n_min + 1)).astype(jnp.int32)


def sample(state: ReplayState, key: jax.Array, *, sampler: StartSampler, batch_size: int,
           n_min: int, n_max: int, gamma: Any, num_envs: int, frame_stack: int = 1) -> Batch:
    """A batch of B n-step transitions (with replacement).

    Uniform: start rows uniform over valid rows by exact rejection sampling; weights
    are ones. Prioritized: start rows with probability p_t^alpha / sum_j p_j^alpha by a
    descent of the sum tree, O(B log C); weights w_t = (P(t) / min_j P(j))^-beta over
    valid rows, so max w <= 1. Before `can_sample(state)` is true the batch is
    arbitrary and its weights are 0. With frame_stack k > 1 each image leaf of obs and
    next_obs is a stack of k frames [B, H, W, C·k] (jaxsac.replay.frames).
    """
    # One draw gives every word the first attempt needs (on the CPU each draw of
    # jax's threefry is a loop, so one draw is much faster than several): row 0 draws
    # n, the other rows the start rows. The second key seeds any further rejection
    # rounds. Each sampler draws with the generator that measured faster in its program
    # (docs/performance.md); both give jax.random.bits' words.
    words_key, rounds_key = jax.random.split(key)
    words = sampler.draw_words(words_key, (1 + sampler.words_per_sample, batch_size))
    start, weights = sampler.draw_starts(state, words[1:].T, rounds_key, can_sample(state))
    return n_step_batch(state, start, drawn_n(words[0], n_min, n_max), gamma, num_envs,
                        n_max, weights, frame_stack)


def can_sample(state: ReplayState) -> jax.Array:
    """True ([] bool) once the buffer holds at least one valid start row.

    A valid start row is a written, not-overwritten row that is not a reset row, so
    this is true after the first `add` (the first row of each env is valid) and
    stays true unless every stored row is a reset row (possible only when each
    env's ring holds a single step).
    """
    return state.num_valid > 0


def episode_buffer(
    capacity: int,
    num_envs: int,
    batch_size: int,
    n_step: int | tuple[int, int] = 1,
    gamma: float | jax.Array = 0.99,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    eps: float = 1e-6,
    beta_final: float | None = None,
    beta_steps: int = 0,
    frame_stack: int = 1,
) -> ReplayBuffer:
    """An episode replay buffer that builds n-step transitions at sample time.

    Args:
      capacity: steps stored in all (C); a multiple of num_envs, each env gets a ring of
        C // num_envs steps; the oldest are overwritten first.
      num_envs: envs adding one step each per `add` call (E).
      batch_size: transitions per `sample` (B).
      n_step: n, or (n_min, n_max): each sample draws n uniformly from n_min..n_max.
      gamma: the discount; a Python number in [0, 1] or a (possibly traced) JAX scalar.
      prioritized: sample start rows by priority (p^alpha) instead of uniformly.
      alpha: priority exponent, >= 0 (0 is uniform over valid rows).
      beta: importance-sampling exponent in [0, 1].
      eps: added to |td_error| to give the priority p.
      beta_final: if given, beta moves linearly from `beta` to `beta_final` over
        `beta_steps` calls of `update_priorities` (one per sample in a training loop;
        `sample` does not return a state, so the count advances there), then stays.
      beta_steps: length of that schedule.
      frame_stack: k; > 1 samples each image leaf ([H, W, C] uint8) of obs and next_obs
        as the last k frames of its episode, [H, W, C·k] (jaxsac.replay.frames); each
        env's ring must hold at least k rows.

    Returns:
      ReplayBuffer(init, add, sample, update_priorities, can_sample), all pure:
        init(example_step) -> state; example_step is one unbatched Step.
        add(state, step) -> state; step has leading axis E (all envs advance together).
        sample(state, key) -> Batch with leading axis B.
        update_priorities(state, indices [B] int32, td_error [B] float32) -> state;
          `state` unchanged when sampling uniformly.
        can_sample(state) -> [] bool.

    Raises ValueError naming the argument, its value and what is allowed.
    """
    check_settings(capacity, num_envs, batch_size, gamma, prioritized, alpha, beta, eps,
                   beta_final, beta_steps)
    n_min, n_max = checks.check_n_step("episode_buffer", n_step)
    check_frame_stack(frame_stack, capacity // num_envs)
    if prioritized:
        sampler = prioritized_sampler(capacity, float(alpha), float(beta), float(eps),
                                      beta_final, beta_steps)
    else:
        sampler = uniform_sampler(num_envs)
    return ReplayBuffer(
        init=functools.partial(init, capacity=capacity, num_envs=num_envs, sampler=sampler,
                               frame_stack=frame_stack),
        add=functools.partial(add, num_envs=num_envs, sampler=sampler,
                              frame_stack=frame_stack),
        sample=functools.partial(sample, sampler=sampler, batch_size=batch_size,
                                 n_min=n_min, n_max=n_max, gamma=gamma, num_envs=num_envs,
                                 frame_stack=frame_stack),
        update_priorities=sampler.update_priorities,
        can_sample=can_sample,
    )
