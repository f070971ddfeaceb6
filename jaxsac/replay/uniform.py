"""Uniform sampling: start rows exactly uniform over the valid rows, by rejection sampling.

`uniform_sampler(num_envs)` is the `StartSampler` of a buffer built with
`prioritized=False`: no priority trees, weights of ones, and `update_priorities` returns
the state unchanged (so callers can call it unconditionally).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxsac.replay.state import NOT_A_START, ReplayState, StartSampler

UNIFORM_CANDIDATES = 4
"""Candidate rows drawn per sample in each round of uniform rejection sampling."""


def no_trees() -> tuple[tuple, tuple]:
    """(priority_sums, priority_mins) of a uniform buffer: empty, it keeps no priorities."""
    return (), ()


def unchanged(state: ReplayState, *_: jax.Array) -> ReplayState:
    """`state` itself: a uniform buffer keeps no priorities to add or update."""
    return state


def rejection_sampled_starts(state: ReplayState, words: jax.Array, key: jax.Array,
                             num_envs: int) -> jax.Array:
    """Start rows [B] uniform over valid rows, by exact rejection sampling.

    words: [B, UNIFORM_CANDIDATES] uint32 random words for the first round; key seeds any
    further rounds. The written rows are a contiguous prefix [0, W) of the flat rows (all
    envs advance in lockstep). Each word gives a candidate uniform on [0, 2^m), the top m
    bits, with 2^m the smallest power of two >= W; a candidate is accepted if it is < W
    and a valid start (not a reset, failed or stack-cut row), and the first
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


def draw_uniform_starts(state: ReplayState, words: jax.Array, key: jax.Array,
                        can_sample: jax.Array, *,
                        num_envs: int) -> tuple[jax.Array, jax.Array]:
    """(start rows [B] int32, weights [B] float32): rows uniform over the valid rows
    (`rejection_sampled_starts` on words [B, UNIFORM_CANDIDATES]), weights ones, or 0
    while the buffer cannot sample."""
    start = rejection_sampled_starts(state, words, key, num_envs)
    weights = jnp.where(can_sample, jnp.ones((words.shape[0],), jnp.float32), 0.0)
    return start, weights


def uniform_sampler(num_envs: int) -> StartSampler:
    """The `StartSampler` of uniform sampling for a buffer of `num_envs` envs.

    Its words come from `jax.random.bits` itself: the straight-line hash
    (`random_bits.uint32_bits`), faster for prioritized sampling, measured slower in the
    uniform program (docs/performance.md).
    """
    return StartSampler(
        empty_trees=no_trees,
        add_priorities=unchanged,
        words_per_sample=UNIFORM_CANDIDATES,
        draw_words=functools.partial(jax.random.bits, dtype=jnp.uint32),
        draw_starts=functools.partial(draw_uniform_starts, num_envs=num_envs),
        update_priorities=unchanged,
        drop_starts=unchanged,
    )
