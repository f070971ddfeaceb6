"""Helpers shared by several test files."""

from __future__ import annotations

import jax
import numpy as np

TINY = dict(hidden_sizes=(32, 32), batch_size=32, buffer_capacity=2_000, learning_starts=100,
            log_every=200, total_env_steps=600, eval_episodes=2)
"""SACConfig overrides for runs that only check plumbing: small nets, few steps."""


def leaves_equal(a, b) -> bool:
    """Bit-equal pytrees of the same structure: every leaf the same dtype and bits (NaN
    equal to NaN, as in metrics before learning starts; typed keys by their data)."""
    def same(x, y):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and bool(np.array_equal(
            x, y, equal_nan=np.issubdtype(x.dtype, np.floating)))
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(same(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
