"""Random uint32 words: `jax.random.bits(key, shape, jnp.uint32)`, the same bits, as
straight-line code for threefry2x32 keys.

XLA on the CPU compiles jax's threefry2x32 hash as a loop of five rolled blocks, which
costs far more than its arithmetic; written out, the replay buffer's draw takes a
fraction of the time (docs/performance.md, "Changes and their effect"). `uint32_bits`
computes the hash (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011:
20 rounds, key schedule every 4) on the counters jax uses for the key, so every word
equals jax's; keys of other generators, jax's non-partitionable counter layout, and
draws of 2^32 words or more go to `jax.random.bits` itself.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
"""The rotation distances of the four rounds of even and odd blocks."""
_PARITY = 0x1BD11BDA
"""Threefry's key-schedule constant."""


def _rotate_left(x: jax.Array, distance: int) -> jax.Array:
    return (x << jnp.uint32(distance)) | (x >> jnp.uint32(32 - distance))


def _threefry2x32(k1: jax.Array, k2: jax.Array, x1: jax.Array,
                  x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds of the key (k1, k2) [] on the counters (x1, x2)
    (uint32, any equal shapes)."""
    schedule = (k1, k2, k1 ^ k2 ^ jnp.uint32(_PARITY))
    x1, x2 = x1 + schedule[0], x2 + schedule[1]
    for block in range(5):
        for distance in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, distance) ^ x1
        x1 = x1 + schedule[(block + 1) % 3]
        x2 = x2 + schedule[(block + 2) % 3] + jnp.uint32(block + 1)
    return x1, x2


def uint32_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """`jax.random.bits(key, shape, jnp.uint32)`: uint32 words of `shape`.

    key: one typed PRNG key, or a raw key (uint32 [2]) of jax's default generator.
    For threefry2x32 keys the words are those jax draws with its partitionable counters
    (word i of the flattened shape is the xor of the hash's two outputs on the 64-bit
    counter i), computed without jax's rolled loop.
    """
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    size = math.prod(shape)
    if (str(jax.random.key_impl(key)) != "threefry2x32" or key.shape != ()
            or not jax.config.jax_threefry_partitionable or size >= 2**32):
        return jax.random.bits(key, shape, jnp.uint32)
    k1, k2 = jax.random.key_data(key)
    counters = jax.lax.iota(jnp.uint32, size).reshape(shape)  # the counters' low words
    y1, y2 = _threefry2x32(k1, k2, jnp.zeros(shape, jnp.uint32), counters)
    return y1 ^ y2
