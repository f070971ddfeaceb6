"""Reward scaling by the scale of the discounted return (SimbaV2's, Lee et al. 2025),
`SACConfig.scale_rewards`: the learner sees every reward divided by

    max( √(var(G) + ε),  max|G| / g_max ),   ε = 1e-8, g_max = `reward_scale_g_max`

with G the running discounted return of each env column, G_t = γ G_{t−1} + r_t from
G = 0 at an episode's start (it restarts after a terminated or truncated step), var(G)
the running variance of every G seen (every column at every step; gymnasium's
RunningMeanStd, starting at mean 0, variance 1, count 1e-4) and max|G| the largest |G|
seen. The second term keeps the scaled returns within about ±g_max while var(G) is
still small. The statistics are the run's state (`TrainState.returns`, in checkpoints),
updated by each iteration's steps; the replay buffer keeps the rewards as the env gave
them and each sampled batch's n-step reward is divided by the scale of that moment
(docs/semantics.md, "Reward scaling").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxsac.connectors import ObsNormState, update_obs_norm
from jaxsac.types import Batch, Step

RETURN_SCALE_EPS = 1e-8
"""ε under the square root of the return's variance."""
INITIAL_COUNT = 1e-4
"""The running statistics' count before any return (gymnasium's RunningMeanStd's)."""


class ReturnScaleState(NamedTuple):
    """discounted_return: [C] G of each env column's running episode; stats: the running
    mean, variance and count ([] each) of every G seen; max_abs_return: [] the largest
    |G| seen."""

    discounted_return: jax.Array
    stats: ObsNormState
    max_abs_return: jax.Array


class ReturnScaler(NamedTuple):
    """Reward scaling of one run: its discount `gamma` (possibly traced, a sweep), the
    bound `g_max` and the number of env columns C of an iteration's steps."""

    gamma: Any
    g_max: float
    columns: int

    def init(self) -> ReturnScaleState:
        """Before any step: G = 0, mean 0, variance 1, count 1e-4, max|G| = 0."""
        zero = jnp.zeros((), jnp.float32)
        return ReturnScaleState(
            jnp.zeros((self.columns,), jnp.float32),
            ObsNormState(zero, jnp.ones((), jnp.float32),
                         jnp.asarray(INITIAL_COUNT, jnp.float32)), zero)

    def update(self, state: ReturnScaleState, step: Step) -> ReturnScaleState:
        """After an iteration's steps [C]: each column's G_t = γ G_{t−1} + r_t joins the
        statistics (a failed row, which holds no env step, neither moves G nor joins),
        then restarts at 0 where the episode ended (terminated or truncated)."""
        valid = (jnp.ones_like(step.terminated) if step.failed is None
                 else ~step.failed)
        ret = jnp.where(valid, self.gamma * state.discounted_return + step.reward,
                        state.discounted_return)
        stats = update_obs_norm(state.stats, ret, valid)
        largest = jnp.max(jnp.where(valid, jnp.abs(ret), 0.0))
        ended = valid & (step.terminated | step.truncated)
        return ReturnScaleState(jnp.where(ended, 0.0, ret), stats,
                                jnp.maximum(state.max_abs_return, largest))

    def scale(self, state: ReturnScaleState) -> jax.Array:
        """[] the divisor of rewards: max(√(var(G) + ε), max|G| / g_max)."""
        return jnp.maximum(jnp.sqrt(state.stats.var + RETURN_SCALE_EPS),
                           state.max_abs_return / self.g_max)

    def scale_batch(self, state: ReturnScaleState, batch: Batch) -> Batch:
        """The batch with its (n-step discounted) rewards divided by `scale`."""
        return batch._replace(reward=batch.reward / self.scale(state))


def return_scaler(config: Any, gamma: Any, columns: int) -> ReturnScaler | None:
    """The run's ReturnScaler with `config.scale_rewards` (gamma: the run's discount,
    possibly traced), else None."""
    if not config.scale_rewards:
        return None
    return ReturnScaler(gamma, float(config.reward_scale_g_max), columns)
