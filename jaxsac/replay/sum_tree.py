"""The priority trees of prioritized replay: a sum tree and a min tree over the rows.

Each tree is a tuple of levels, leaves first; level l has shape [rows_l, TREE_ARITY] and
level l+1 holds one node per row of level l, so the root is `levels[-1][0]` reduced.
Leaves are rows of the buffer (leaf id = row). Every function is pure and jittable.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

TREE_ARITY = 16
"""Children per node: depth ceil(log_16 capacity), 5 levels at 10^6 rows."""


def level_rows(capacity: int) -> tuple[int, ...]:
    """Rows of each tree level, leaves first; level l+1 has one node per row of level l."""
    rows, nodes = [], capacity
    while True:
        nodes = -(-nodes // TREE_ARITY)
        rows.append(nodes)
        if nodes == 1:
            return tuple(rows)


def init(capacity: int, fill: float) -> tuple[jax.Array, ...]:
    return tuple(jnp.full((r, TREE_ARITY), fill, jnp.float32) for r in level_rows(capacity))


def write(sums: tuple[jax.Array, ...], mins: tuple[jax.Array, ...], leaf: jax.Array,
                sum_value: jax.Array, min_value: jax.Array):
    """Sets leaves and recomputes their ancestors from their children; O(M log capacity).

    leaf: [M] int32 leaf ids (= rows). A repeated id gets the largest of its values in
    both trees (a scatter-max, deterministic on every backend, unlike a scatter-set with
    repeated ids). Each node is recomputed as the sum (min) of its children, never
    updated by a delta, so float32 error does not accumulate.
    """
    # An ordering token: the previous write to the trees ended at their top level, after
    # all its reads of the lower levels. Making this write's leaf values depend on the
    # top level (through a zero XLA cannot fold away) orders it after those reads;
    # without it XLA may copy whole levels to keep the reads valid.
    order = 0.0 * (jnp.minimum(sums[-1][0, 0], 0.0) + jnp.minimum(mins[-1][0, 0], 0.0))
    sum_value, min_value = sum_value + order, min_value + order
    new_sums, new_mins = [], []
    node = leaf
    for depth, (level_sum, level_min) in enumerate(zip(sums, mins, strict=True)):
        row, col = node // TREE_ARITY, node % TREE_ARITY
        if depth == 0:  # leaves: clear to 0, then max over repeated ids
            # min(value, 0) is 0 (values are >= 0) but keeps the clearing write in the
            # data flow of the values, after any read they were computed from.
            level_sum = (level_sum.at[row, col].set(jnp.minimum(sum_value, 0.0))
                         .at[row, col].max(sum_value))
            level_min = (level_min.at[row, col].set(jnp.minimum(min_value, 0.0))
                         .at[row, col].max(min_value))
        else:  # a repeated node gets the same value from every writer
            level_sum = level_sum.at[row, col].set(sum_value)
            level_min = level_min.at[row, col].set(min_value)
        new_sums.append(level_sum)
        new_mins.append(level_min)
        sum_value = jnp.sum(level_sum[row], axis=-1)
        min_value = jnp.min(level_min[row], axis=-1)
        node = row
    return tuple(new_sums), tuple(new_mins)


def root(levels: tuple[jax.Array, ...], reduce: Callable) -> jax.Array:
    return reduce(levels[-1][0])


def sample(sums: tuple[jax.Array, ...], uniforms: jax.Array):
    """Leaf ids [B] drawn with probability leaf / total, and their leaf values [B].

    uniforms: [B, depth] in [0, 1 - 2^-23].

    The descent uses a fresh uniform per level and picks child j with probability
    child_j / sum(children), so float32 resolution is relative to each node, not to the
    whole tree. It never lands on an empty leaf while the root is positive: the prefix
    sums are accumulated left to right, so they never decrease, and target = u * total
    < total (u <= 1 - 2^-23, total a positive normal float); the chosen child is the
    first j with prefix_j > target >= prefix_{j-1}, so its mass is positive.
    """
    node = jnp.zeros(uniforms.shape[:1], jnp.int32)
    for depth, level in enumerate(reversed(sums)):
        children = level[node]  # [B, TREE_ARITY]
        running = children[:, 0]
        prefix = [running]
        for j in range(1, TREE_ARITY):  # unrolled on purpose: a fixed left-to-right order
            running = running + children[:, j]
            prefix.append(running)
        prefix = jnp.stack(prefix, axis=1)
        target = uniforms[:, depth] * running
        child = jnp.sum(prefix <= target[:, None], axis=1, dtype=jnp.int32)
        node = node * TREE_ARITY + child
    # The leaf values come from the gather that chose the leaves: a separate read of the
    # leaves would let XLA order it after a following in-place update_priorities, and
    # then it copies the whole leaf level to keep the read valid.
    leaf = jnp.sum(jnp.where(jnp.arange(TREE_ARITY) == child[:, None], children, 0.0), axis=1)
    return node, leaf

