"""A replay buffer of S independent data shards behind the `ReplayBuffer` interface.

Shard s owns the envs s·E/S .. (s+1)·E/S − 1 and C/S rows; every sample draws B/S rows
from each shard and concatenates them shard by shard (jaxsac.sharding places the shard
axis on a device mesh; the computation is defined by S alone).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxsac.replay.state import ReplayBuffer, ReplayState
from jaxsac.types import Batch, Step


def _split(x: jax.Array, num_shards: int) -> jax.Array:
    """[N, ...] -> [S, N/S, ...], shard s holding rows s·N/S .. (s+1)·N/S − 1."""
    return x.reshape(num_shards, x.shape[0] // num_shards, *x.shape[1:])


def _merge(x: jax.Array) -> jax.Array:
    """[S, N/S, ...] -> [N, ...], the inverse of `_split`."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def shard_weight_scale(state: ReplayState, beta: jax.Array) -> jax.Array:
    """[S] factors turning each shard's importance weights into global ones.

    Shard s draws B/S samples, so row t of shard s is drawn with probability
    P(t) = p_t^α / (S · Σ_s), Σ_s the sum of p^α over the shard. Within the shard the
    buffer normalises by the shard's smallest probability; the global weight
    w_t = (P(t) / min_j P(j))^−β normalises by the smallest over all shards, which is
    the shard weight times ((m_s/Σ_s) / min_s'(m_s'/Σ_s'))^−β, m_s the shard's smallest
    p^α. Shards without valid rows (no mass) take no part in the minimum, and get 0
    (their samples are arbitrary, as from an empty buffer).
    state: a ReplayState with leading shard axis S; beta: [S] (equal entries).
    """
    total = jnp.sum(state.priority_sums[-1][:, 0], axis=-1)  # the roots' children: [S, arity]
    smallest = jnp.min(state.priority_mins[-1][:, 0], axis=-1)
    valid = state.num_valid > 0
    log_ratio = jnp.where(valid, jnp.log(smallest) - jnp.log(total), jnp.inf)
    return jnp.where(valid, jnp.exp(-beta * (log_ratio - jnp.min(log_ratio))), 0.0)


def sharded_buffer(shard: ReplayBuffer, num_shards: int,
                   beta: Callable[[ReplayState], jax.Array] | None = None) -> ReplayBuffer:
    """A buffer of `num_shards` (S) independent shards behind the ReplayBuffer interface.

    shard: the buffer of one shard (built for E/S envs, capacity C/S, batch B/S).
    beta: for prioritized shards, state of one shard -> its importance exponent β;
        None for uniform sampling.

    The state is `shard`'s ReplayState with a leading axis S on every leaf.
      add(state, step): step leaves [E, ...]; envs s·E/S .. (s+1)·E/S − 1 go to shard s.
      sample(state, key): Batch [B], samples b·B/S .. (b+1)·B/S − 1 from shard b, drawn
        with `fold_in(key, b)`; `indices` are rows within the sample's shard. Prioritized:
        weights normalised over all shards (`shard_weight_scale`).
      update_priorities(state, indices [B], td_error [B]): a batch's indices, in its order.
      can_sample(state): every shard holds a valid start row.
    """

    def init(example_step: Step) -> ReplayState:
        one = shard.init(example_step)
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_shards, *x.shape)), one)

    def add(state: ReplayState, step: Step) -> ReplayState:
        return jax.vmap(shard.add)(state, jax.tree.map(lambda x: _split(x, num_shards), step))

    def sample(state: ReplayState, key: jax.Array) -> Batch:
        keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(jnp.arange(num_shards))
        batch = jax.vmap(shard.sample)(state, keys)  # leaves [S, B/S, ...]
        if beta is not None:
            scale = shard_weight_scale(state, jax.vmap(beta)(state))
            batch = batch._replace(weights=batch.weights * scale[:, None])
        return jax.tree.map(_merge, batch)

    def update_priorities(state: ReplayState, indices: jax.Array,
                          td_error: jax.Array) -> ReplayState:
        return jax.vmap(shard.update_priorities)(state, _split(indices, num_shards),
                                                 _split(td_error, num_shards))

    def can_sample(state: ReplayState) -> jax.Array:
        return jnp.all(jax.vmap(shard.can_sample)(state))

    return ReplayBuffer(init, add, sample, update_priorities, can_sample)
