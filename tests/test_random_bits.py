"""random_bits.uint32_bits against jax.random.bits itself: the same words for every key
kind, shape and transformation the buffer uses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac.random_bits import uint32_bits


@pytest.mark.parametrize("shape", [(), (1,), (5,), (6, 256), (5, 256), (3, 7, 11)])
@pytest.mark.parametrize("seed", [0, 1, 2**31 + 5])
def test_the_words_are_jaxs_for_threefry_keys(shape, seed):
    key = jax.random.key(seed)
    expected = jax.random.bits(key, shape, jnp.uint32)
    np.testing.assert_array_equal(uint32_bits(key, shape), expected)
    np.testing.assert_array_equal(jax.jit(uint32_bits, static_argnums=1)(key, shape),
                                  expected)


def test_raw_keys_split_keys_and_vmap_give_jaxs_words():
    raw = jax.random.PRNGKey(7)
    np.testing.assert_array_equal(uint32_bits(raw, (4, 9)),
                                  jax.random.bits(raw, (4, 9), jnp.uint32))
    keys = jax.random.split(jax.random.fold_in(jax.random.key(3), 11), 5)
    mine = jax.jit(jax.vmap(lambda k: uint32_bits(k, (2, 64))))(keys)
    theirs = jax.vmap(lambda k: jax.random.bits(k, (2, 64), jnp.uint32))(keys)
    np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("impl", ["philox4x32", "rbg"])
def test_other_generators_go_to_jax(impl):
    key = jax.random.key(4, impl=impl)
    np.testing.assert_array_equal(uint32_bits(key, (3, 5)),
                                  jax.random.bits(key, (3, 5), jnp.uint32))


def test_the_words_are_uniform():
    """Each of the 32 bit positions is set in half the words (within 5 sigma)."""
    words = np.asarray(uint32_bits(jax.random.key(9), (200_000,)))
    ones = ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 5 * 0.5 / np.sqrt(words.size)), ones
