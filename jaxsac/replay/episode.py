"""The episode replay buffer: each env step stored once, n-step transitions built at sample time.

`episode_buffer(...)` returns a `ReplayBuffer`, a NamedTuple of five pure functions
(`init, add, sample, update_priorities, can_sample`) in the style of optax's
GradientTransformation. The state is a `ReplayState` pytree; every function is `jit`-,
`vmap`- and `scan`-able, and all randomness comes from the key passed to `sample`.

Storage. Each of the `num_envs` envs owns a time-ordered ring of `capacity // num_envs`
slots; all envs advance in lockstep, so one `add` writes one slot of every ring. The
flat row of env `e` at slot `s` is `s * num_envs + e` (these are `Batch.indices`). A row
holds one observation, one action, the reward and a byte of flags (terminated,
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

Prioritized replay (docs/semantics.md, "Prioritized replay") keeps a `TREE_ARITY`-ary sum
tree and min tree of p^alpha over the rows; reset rows and unwritten rows hold 0 in the
sum tree (and +inf in the min tree), so they are never drawn.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxsac import checks
from jaxsac.random_bits import uint32_bits
from jaxsac.replay import sum_tree
from jaxsac.replay.n_step import n_step_batch
from jaxsac.replay.state import (
    DONE,
    FAILED,
    NOT_A_START,
    RESET,
    TERMINATED,
    TRUNCATED,
    ReplayBuffer,
    ReplayState,
)
from jaxsac.replay.sum_tree import TREE_ARITY
from jaxsac.replay.validation import (
    check_example_step,
    check_priority_args,
    check_settings,
    check_step,
)
from jaxsac.types import Batch, Step

UNIFORM_CANDIDATES = 4
"""Candidate rows drawn per sample in each round of uniform rejection sampling."""

# p^alpha is clipped into this range so that a valid row always has positive mass and the
# float32 sum of 2^30 leaves cannot overflow.
_MIN_LEAF = 1e-30
_MAX_LEAF = 1e28


# --------------------------------------------------------------------------- uniform starts


def _unit_floats(words: jax.Array) -> jax.Array:
    """uint32 words -> float32 uniform on {0, 2^-23, ..., 1 - 2^-23}."""
    return jax.lax.shift_right_logical(words, jnp.uint32(9)).astype(jnp.float32) * 2.0**-23


def _uniform_starts(state: ReplayState, words: jax.Array, key: jax.Array,
                    num_envs: int) -> jax.Array:
    """Start rows [B] uniform over valid rows, by exact rejection sampling.

    words: [B, UNIFORM_CANDIDATES] uint32 random words for the first round; key seeds any
    further rounds. The written rows are a contiguous prefix [0, W) of the flat rows (all
    envs advance in lockstep). Each word gives a candidate uniform on [0, 2^m), the top m
    bits, with 2^m the smallest power of two >= W; a candidate is accepted if it is < W
    and not a reset row (the only written rows that are not valid starts), and the first
    accepted candidate of each sample is kept. That is rejection sampling, so the kept
    row is exactly uniform over the valid rows; no O(capacity) work, just a gather of
    one flag byte per candidate. A candidate is accepted with probability
    (W / 2^m) * (valid / W) >= 1/2 * valid / W, and reset rows are at most about half of
    the written rows (one per episode end). A round of UNIFORM_CANDIDATES = 4 candidates
    thus fails for a sample with probability <= (3/4)^4 ~ 0.3 in the worst case (one-step
    episodes, W just above a power of two), <= (1/2)^4 ~ 0.06 with long episodes, and
    ~1e-5 for a full buffer of 10^6 rows over 8 envs; only then does a further round run,
    in a `while_loop`, for the samples still without a row.
    """
    written = jnp.maximum(state.filled_slots * num_envs, 1).astype(jnp.uint32)
    shift = jax.lax.clz(written - 1)  # 32 - m; candidates are words >> shift

    def pick(words):
        candidates = jax.lax.shift_right_logical(words, shift)
        in_range = candidates < written
        candidates = jnp.where(in_range, candidates, 0).astype(jnp.int32)
        acceptable = in_range & ((state.flags[candidates] & NOT_A_START) == 0)
        chosen = candidates[:, -1]
        for j in reversed(range(candidates.shape[1] - 1)):  # keep the first acceptable one
            chosen = jnp.where(acceptable[:, j], candidates[:, j], chosen)
        return chosen, jnp.any(acceptable, axis=1)

    start, accepted = pick(words)

    def more_rounds_needed(carry):
        _, _, accepted = carry
        return jnp.any(~accepted) & (state.num_valid > 0)

    def another_round(carry):
        round_index, start, accepted = carry
        round_words = jax.random.bits(jax.random.fold_in(key, round_index),
                                      words.shape[::-1], jnp.uint32).T
        chosen, ok = pick(round_words)
        return round_index + 1, jnp.where(accepted, start, chosen), accepted | ok

    _, start, _ = jax.lax.while_loop(more_rounds_needed, another_round,
                                     (jnp.int32(1), start, accepted))
    return start



# --------------------------------------------------------------------------- priorities


def _ignoring(indices: jax.Array, current: jax.Array, ok: jax.Array, leaf_value: jax.Array):
    """(leaf ids [B], sum-tree values [B], min-tree values [B]) for a tree write that
    sets row indices[b] to leaf_value[b] where ok[b] and changes nothing else.

    current: [B] the sum-tree leaves of rows `indices` (a row's min-tree leaf is the
    same where it is positive, else +inf). A write of `sum_tree.write` sets every id it
    names (the largest value where an id repeats), so the entries to ignore are sent to
    a row the write sets anyway with a value that cannot win there (0): the first ok
    entry's row. When no entry is ok they all write the last entry's row's own values
    back.
    """
    position = jnp.arange(ok.shape[0])
    first_ok = jnp.min(jnp.where(ok, position, ok.shape[0] - 1))
    any_ok = jnp.any(ok)
    anchor, anchor_leaf = indices[first_ok], current[first_ok]
    keep_sum = jnp.where(any_ok, 0.0, anchor_leaf)
    keep_min = jnp.where(any_ok, 0.0, jnp.where(anchor_leaf > 0, anchor_leaf, jnp.inf))
    return (jnp.where(ok, indices, anchor), jnp.where(ok, leaf_value, keep_sum),
            jnp.where(ok, leaf_value, keep_min))


# --------------------------------------------------------------------------- failed rows


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


# --------------------------------------------------------------------------- the factory


def scheduled_beta(priority_updates: jax.Array, beta: float, beta_final: float | None,
                   beta_steps: int) -> jax.Array:
    """The importance-sampling exponent [] float32 after `priority_updates` updates:
    `beta`, or moving linearly to `beta_final` over `beta_steps` updates, then staying."""
    if beta_final is None:
        return jnp.float32(beta)
    if beta_steps == 0:
        return jnp.float32(beta_final)
    progress = jnp.minimum(priority_updates.astype(jnp.float32) / beta_steps, 1.0)
    return jnp.float32(beta) + (jnp.float32(beta_final) - jnp.float32(beta)) * progress


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

    Returns:
      ReplayBuffer(init, add, sample, update_priorities, can_sample), all pure:
        init(example_step) -> state; example_step is one unbatched Step.
        add(state, step) -> state; step has leading axis E (all envs advance together).
        sample(state, key) -> Batch with leading axis B.
        update_priorities(state, indices [B] int32, td_error [B] float32) -> state.
        can_sample(state) -> [] bool.

    Raises ValueError naming the argument, its value and what is allowed.
    """
    check_settings(capacity, num_envs, batch_size, gamma, prioritized, alpha, beta, eps,
                   beta_final, beta_steps)
    n_min, n_max = checks.check_n_step("episode_buffer", n_step)
    ring = capacity // num_envs
    alpha, beta, eps = float(alpha), float(beta), float(eps)

    def init(example_step: Step) -> ReplayState:
        """An empty buffer for steps shaped like `example_step` (one unbatched Step)."""
        check_example_step(example_step)
        obs = jnp.asarray(example_step.obs)
        action = jnp.asarray(example_step.action)
        trees = (sum_tree.init(capacity, 0.0), sum_tree.init(capacity, jnp.inf)) if prioritized \
            else ((), ())
        return ReplayState(
            obs=jnp.zeros((capacity, *obs.shape), obs.dtype),
            action=jnp.zeros((capacity, *action.shape), action.dtype),
            reward=jnp.zeros((capacity,), jnp.float32),
            flags=jnp.zeros((capacity,), jnp.uint8),
            last_next_obs=jnp.zeros((num_envs, *obs.shape), obs.dtype),
            write_slot=jnp.int32(0),
            filled_slots=jnp.int32(0),
            num_valid=jnp.int32(0),
            priority_sums=trees[0],
            priority_mins=trees[1],
            max_priority=jnp.float32(1.0),
            priority_updates=jnp.int32(0),
        )

    def add(state: ReplayState, step: Step) -> ReplayState:
        """Appends one step per env (`step` fields have leading axis num_envs). O(E log C).

        A row whose env's previous row was terminated or truncated is stored as a reset
        row (never a start). A failed row (`step.failed`) is never a start either, and
        it marks its env's previous row truncated: the episode ends at its last real
        step, bootstrapping from that step's real next observation (the failed row's
        obs). New valid rows get priority p_max^alpha.
        """
        check_step(state, step, num_envs)
        slot = state.write_slot
        first_row = slot * num_envs
        rows = first_row + jnp.arange(num_envs, dtype=jnp.int32)
        # One gather for both reads, and part of it feeds the new flags: that orders the
        # read before the in-place write, so XLA does not copy the whole flags array.
        newest_rows = (slot - 1) % ring * num_envs + jnp.arange(num_envs, dtype=jnp.int32)
        old_flags = state.flags[jnp.concatenate([newest_rows, rows])]
        newest_flags, overwritten_flags = old_flags[:num_envs], old_flags[num_envs:]
        is_reset = (state.filled_slots > 0) & ((newest_flags & DONE) != 0)
        overwritten_valid = jnp.where(state.filled_slots == ring,
                                      jnp.sum((overwritten_flags & NOT_A_START) == 0), 0)
        flags = (jnp.asarray(step.terminated, bool).astype(jnp.uint8) * TERMINATED
                 | jnp.asarray(step.truncated, bool).astype(jnp.uint8) * TRUNCATED
                 | is_reset.astype(jnp.uint8) * RESET)
        not_a_start = is_reset
        failed = getattr(step, "failed", None)
        if failed is not None:
            failed = jnp.asarray(failed, bool)
            flags = flags | failed.astype(jnp.uint8) * FAILED
            not_a_start = is_reset | failed

        def write(buffer, values):
            values = jnp.asarray(values, buffer.dtype)
            start = (first_row,) + (0,) * (buffer.ndim - 1)
            return jax.lax.dynamic_update_slice(buffer, values, start)

        state = state.replace(
            obs=write(state.obs, step.obs),
            action=write(state.action, step.action),
            reward=write(state.reward, step.reward),
            flags=_end_before_failures(write(state.flags, flags), failed, newest_rows,
                                       newest_flags, state.filled_slots > 0, ring),
            last_next_obs=jnp.asarray(step.next_obs, state.last_next_obs.dtype),
            write_slot=(slot + 1) % ring,
            filled_slots=jnp.minimum(state.filled_slots + 1, ring),
            num_valid=(state.num_valid - overwritten_valid
                       + jnp.sum(~not_a_start)).astype(jnp.int32),
        )
        if prioritized:
            new_priority = jnp.clip(state.max_priority ** alpha, _MIN_LEAF, _MAX_LEAF)
            sums, mins = sum_tree.write(state.priority_sums, state.priority_mins, rows,
                                     jnp.where(not_a_start, 0.0, new_priority),
                                     jnp.where(not_a_start, jnp.inf, new_priority))
            state = state.replace(priority_sums=sums, priority_mins=mins)
        return state

    def current_beta(state: ReplayState) -> jax.Array:
        return scheduled_beta(state.priority_updates, beta, beta_final, beta_steps)

    def sample(state: ReplayState, key: jax.Array) -> Batch:
        """A batch of B n-step transitions (with replacement).

        Uniform: start rows uniform over valid rows by exact rejection sampling (see
        `_uniform_starts`); weights are ones. Prioritized: start rows with probability
        p_t^alpha / sum_j p_j^alpha by a descent of the sum tree, O(B log C); weights
        w_t = (P(t) / min_j P(j))^-beta over valid rows, so max w <= 1.
        Before `can_sample(state)` is true the batch is arbitrary and its weights are 0.
        """
        # One draw gives every word the first attempt needs (on the CPU each draw of
        # jax's threefry is a loop, so one draw is much faster than several): row 0 draws
        # n, the other rows the start rows. The second key seeds any further rejection
        # rounds. Either kind of sampling gets jax.random.bits' words: the prioritized
        # one computes them as straight-line code (random_bits; its sample + update 25%
        # faster), the uniform one keeps jax's loop, which measured faster in its
        # program (docs/performance.md).
        words_key, rounds_key = jax.random.split(key)
        start_columns = len(state.priority_sums) if prioritized else UNIFORM_CANDIDATES
        draw = uint32_bits if prioritized else functools.partial(jax.random.bits,
                                                                 dtype=jnp.uint32)
        words = draw(words_key, (1 + start_columns, batch_size))
        start_words = words[1:].T  # [B, start_columns]
        can = can_sample(state)
        if prioritized:
            start, leaf = sum_tree.sample(state.priority_sums, _unit_floats(start_words))
            start = jnp.minimum(start, capacity - 1)  # only if the tree is empty
            min_leaf = sum_tree.root(state.priority_mins, jnp.min)
            weights = jnp.exp(-current_beta(state) * (jnp.log(leaf) - jnp.log(min_leaf)))
            weights = jnp.where(can, weights, 0.0)
        else:
            start = _uniform_starts(state, start_words, rounds_key, num_envs)
            weights = jnp.where(can, jnp.ones((batch_size,), jnp.float32), 0.0)
        # n = n_min + word mod (n_max - n_min + 1): each n's probability is off by at most
        # (n_max - n_min + 1) / 2^32 relative (as with one 32-bit word in any method).
        n = n_min + (words[0] % jnp.uint32(n_max - n_min + 1)).astype(jnp.int32)
        return n_step_batch(state, start, n, gamma, num_envs, n_max, weights)

    def update_priorities(state: ReplayState, indices: jax.Array,
                          td_error: jax.Array) -> ReplayState:
        """Sets p = |td_error| + eps (stored as p^alpha) for rows `indices`; O(B log C).

        indices: [B] int32 (`Batch.indices`); td_error: [B] float32. p_max grows to the
        largest p. A repeated index (the same start row drawn twice) gets the largest of
        its priorities, deterministically on every backend. Ignored, so that the trees
        stay exact: indices of rows that are no longer valid (overwritten by a reset
        row), indices outside [0, C) (an error outside jit), and non-finite td_error
        (the row keeps its priority). With uniform sampling this returns `state`
        unchanged.
        """
        if not prioritized:
            return state
        check_priority_args(indices, td_error, capacity)
        indices = jnp.asarray(indices, jnp.int32)
        td_error = jnp.asarray(td_error, jnp.float32)
        in_range = (indices >= 0) & (indices < capacity)
        indices = jnp.where(in_range, indices, 0)
        priority = jnp.abs(td_error) + jnp.float32(eps)
        # A row is a valid start exactly when its leaf is positive. Reading the leaves
        # (not the flags) keeps this read in the data flow of the tree writes, so a
        # following in-place `add` in the same program does not copy the flags.
        current = state.priority_sums[0][indices // TREE_ARITY, indices % TREE_ARITY]
        ok = (current > 0) & in_range & jnp.isfinite(td_error)
        leaf_value = jnp.clip(priority ** alpha, _MIN_LEAF, _MAX_LEAF)
        target, sum_value, min_value = _ignoring(indices, current, ok, leaf_value)
        sums, mins = sum_tree.write(state.priority_sums, state.priority_mins, target,
                                    sum_value, min_value)
        max_priority = jnp.maximum(state.max_priority,
                                   jnp.max(jnp.where(ok, priority, 0.0)))
        return state.replace(priority_sums=sums, priority_mins=mins,
                             max_priority=max_priority,
                             priority_updates=state.priority_updates + 1)

    def can_sample(state: ReplayState) -> jax.Array:
        """True ([] bool) once the buffer holds at least one valid start row.

        A valid start row is a written, not-overwritten row that is not a reset row, so
        this is true after the first `add` (the first row of each env is valid) and
        stays true unless every stored row is a reset row (possible only when each
        env's ring holds a single step).
        """
        return state.num_valid > 0

    return ReplayBuffer(init, add, sample, update_priorities, can_sample)
