"""Prioritized sampling (docs/semantics.md, "Prioritized replay"): start rows drawn with
probability p^alpha / sum p^alpha from the sum tree, importance-sampling weights from the
min tree, the beta schedule, and the priority updates.

`prioritized_sampler(...)` is the `StartSampler` of a buffer built with
`prioritized=True`. It keeps a `TREE_ARITY`-ary sum tree and min tree of p^alpha over the
rows (`sum_tree`); reset rows and unwritten rows hold 0 in the sum tree (and +inf in the
min tree), so they are never drawn. C = capacity, E = num_envs, B = batch size.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxsac.random_bits import uint32_bits
from jaxsac.replay import sum_tree
from jaxsac.replay.state import ReplayState, StartSampler
from jaxsac.replay.sum_tree import TREE_ARITY
from jaxsac.replay.validation import check_priority_args

# p^alpha is clipped into this range so that a valid row always has positive mass and the
# float32 sum of 2^30 leaves cannot overflow.
_MIN_LEAF = 1e-30
_MAX_LEAF = 1e28


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


def empty_trees(capacity: int) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """(sum tree of zeros, min tree of +inf) over `capacity` rows: no row can be drawn."""
    return sum_tree.init(capacity, 0.0), sum_tree.init(capacity, jnp.inf)


def add_new_row_priorities(state: ReplayState, rows: jax.Array, not_a_start: jax.Array, *,
                           alpha: float) -> ReplayState:
    """`state` with the rows [E] just written at priority p_max^alpha, or 0 (+inf in the
    min tree) where they are not a start (not_a_start [E] bool)."""
    new_priority = jnp.clip(state.max_priority ** alpha, _MIN_LEAF, _MAX_LEAF)
    sums, mins = sum_tree.write(state.priority_sums, state.priority_mins, rows,
                                jnp.where(not_a_start, 0.0, new_priority),
                                jnp.where(not_a_start, jnp.inf, new_priority))
    return state.replace(priority_sums=sums, priority_mins=mins)


def drop_row_priorities(state: ReplayState, rows: jax.Array,
                        drop: jax.Array) -> ReplayState:
    """`state` with rows [M] (distinct) at priority 0 (+inf in the min tree) where
    drop [M] bool, their leaves unchanged elsewhere."""
    current = state.priority_sums[0][rows // TREE_ARITY, rows % TREE_ARITY]
    kept_min = jnp.where(current > 0, current, jnp.inf)
    sums, mins = sum_tree.write(state.priority_sums, state.priority_mins, rows,
                                jnp.where(drop, 0.0, current),
                                jnp.where(drop, jnp.inf, kept_min))
    return state.replace(priority_sums=sums, priority_mins=mins)


def unit_floats(words: jax.Array) -> jax.Array:
    """uint32 words -> float32 uniform on {0, 2^-23, ..., 1 - 2^-23}, same shape."""
    return jax.lax.shift_right_logical(words, jnp.uint32(9)).astype(jnp.float32) * 2.0**-23


def draw_prioritized_starts(state: ReplayState, words: jax.Array, key: jax.Array,
                            can_sample: jax.Array, *, beta: float, beta_final: float | None,
                            beta_steps: int) -> tuple[jax.Array, jax.Array]:
    """(start rows [B] int32, weights [B] float32) drawn by priority.

    words: [B, depth] uint32, one uniform per tree level (`sum_tree.sample`); `key` is
    unused (a descent of the tree never rejects). Row t is drawn with probability
    P(t) = p_t^alpha / sum_j p_j^alpha; its weight is w_t = (P(t) / min_j P(j))^-beta
    over valid rows j, so max w <= 1, with beta from `scheduled_beta`. Weights are 0
    while the buffer cannot sample.
    """
    del key
    start, leaf = sum_tree.sample(state.priority_sums, unit_floats(words))
    start = jnp.minimum(start, state.flags.shape[0] - 1)  # only if the tree is empty
    min_leaf = sum_tree.root(state.priority_mins, jnp.min)
    current_beta = scheduled_beta(state.priority_updates, beta, beta_final, beta_steps)
    weights = jnp.exp(-current_beta * (jnp.log(leaf) - jnp.log(min_leaf)))
    return start, jnp.where(can_sample, weights, 0.0)


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


def update_priorities(state: ReplayState, indices: jax.Array, td_error: jax.Array, *,
                      alpha: float, eps: float) -> ReplayState:
    """Sets p = |td_error| + eps (stored as p^alpha) for rows `indices`; O(B log C).

    indices: [B] int32 (`Batch.indices`); td_error: [B] float32. p_max grows to the
    largest p. A repeated index (the same start row drawn twice) gets the largest of
    its priorities, deterministically on every backend. Ignored, so that the trees
    stay exact: indices of rows that are no longer valid (overwritten by a reset
    row), indices outside [0, C) (an error outside jit), and non-finite td_error
    (the row keeps its priority).
    """
    capacity = state.flags.shape[0]
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


def prioritized_sampler(capacity: int, alpha: float, beta: float, eps: float,
                        beta_final: float | None, beta_steps: int) -> StartSampler:
    """The `StartSampler` of prioritized sampling over `capacity` rows, for the settings
    of `episode_buffer` (alpha, beta, eps, beta_final, beta_steps).

    Its words are `jax.random.bits`'s, computed as straight-line code
    (`random_bits.uint32_bits`, the faster one in this program: docs/performance.md).
    """
    return StartSampler(
        empty_trees=functools.partial(empty_trees, capacity),
        add_priorities=functools.partial(add_new_row_priorities, alpha=alpha),
        words_per_sample=len(sum_tree.level_rows(capacity)),
        draw_words=uint32_bits,
        draw_starts=functools.partial(draw_prioritized_starts, beta=beta,
                                      beta_final=beta_final, beta_steps=beta_steps),
        update_priorities=functools.partial(update_priorities, alpha=alpha, eps=eps),
        drop_starts=drop_row_priorities,
    )
