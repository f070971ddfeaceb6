"""What a log period reports: episode statistics, the learner's metrics and the row.

Every loop (the jitted JAX loop, the gymnasium host loop, single- or multi-agent)
reports the same row, built by `period_row`: the learner metrics averaged over the
period's gradient steps (NaN before the first), `env_steps`, `grad_steps`,
`target_updates`, the last `EPISODE_WINDOW` finished episodes' mean return and length,
`num_episodes` and the deterministic evaluation's mean return.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from jaxsac.agents import AgentLayout
from jaxsac.learner import METRICS as LEARNER_METRICS

EPISODE_WINDOW = 100
"""Completed episodes averaged in `episode_return_mean` (docs/semantics.md)."""


@flax.struct.dataclass
class EpisodeStats:
    """The last `EPISODE_WINDOW` completed episodes (a ring) and how many completed."""

    returns: jax.Array  # [EPISODE_WINDOW] float32
    lengths: jax.Array  # [EPISODE_WINDOW] int32
    count: jax.Array  # [] int32, episodes completed so far

    @classmethod
    def empty(cls) -> EpisodeStats:
        return cls(jnp.zeros(EPISODE_WINDOW, jnp.float32), jnp.zeros(EPISODE_WINDOW, jnp.int32),
                   jnp.zeros((), jnp.int32))

    def record(self, done: jax.Array, returns: jax.Array, lengths: jax.Array) -> EpisodeStats:
        """Push the episodes that ended (done [E] bool, returns/lengths [E])."""
        slot = (self.count + jnp.cumsum(done) - 1) % EPISODE_WINDOW
        slot = jnp.where(done, slot, EPISODE_WINDOW)  # out of range: dropped
        return EpisodeStats(
            returns=self.returns.at[slot].set(returns, mode="drop"),
            lengths=self.lengths.at[slot].set(lengths, mode="drop"),
            count=self.count + jnp.sum(done, dtype=jnp.int32),
        )

    def summary(self) -> dict[str, jax.Array]:
        """Mean return and length over the window (NaN before any episode ended)."""
        filled = jnp.arange(EPISODE_WINDOW) < self.count
        n = jnp.maximum(jnp.sum(filled), 1)
        mean = lambda x: jnp.where(self.count > 0, jnp.sum(jnp.where(filled, x, 0)) / n, jnp.nan)
        return {"episode_return_mean": mean(self.returns),
                "episode_length_mean": mean(self.lengths.astype(jnp.float32)),
                "num_episodes": self.count}


@flax.struct.dataclass
class AgentEpisodeStats:
    """`EpisodeStats` of each agent: leaves with a leading agent axis N.

    Same interface as `EpisodeStats` (record / summary), so the loop's `absorb` uses it
    unchanged; `summary` gives [N] arrays and the sum over agents.
    """

    per_agent: Any  # EpisodeStats with leaves [N, ...]

    @classmethod
    def empty(cls, num_agents: int) -> AgentEpisodeStats:
        return cls(jax.vmap(lambda _: EpisodeStats.empty())(jnp.arange(num_agents)))

    def record(self, done: jax.Array, returns: jax.Array,
               lengths: jax.Array) -> AgentEpisodeStats:
        """Push the episodes that ended (done, returns, lengths: [E·N] runner columns)."""
        num_agents = self.per_agent.count.shape[0]
        by_agent = lambda x: x.reshape(-1, num_agents).T  # [N, E]
        return AgentEpisodeStats(jax.vmap(lambda s, d, r, n: s.record(d, r, n))(
            self.per_agent, by_agent(done), by_agent(returns), by_agent(lengths)))

    def summary(self) -> dict[str, jax.Array]:
        """episode_return_mean, episode_length_mean, num_episodes: [N];
        episode_return_sum: [] the sum over agents of their mean returns."""
        per_agent = jax.vmap(lambda s: s.summary())(self.per_agent)
        return {**per_agent, "episode_return_sum": jnp.sum(per_agent["episode_return_mean"])}


def empty_episode_stats(layout: AgentLayout | None) -> EpisodeStats | AgentEpisodeStats:
    """EpisodeStats, or one per agent for a multi-agent `layout`."""
    if layout is None:
        return EpisodeStats.empty()
    return AgentEpisodeStats.empty(layout.num_agents)


def nan_learner_metrics(shape: tuple[int, ...] = ()) -> dict[str, jax.Array]:
    """NaN learner metrics (no gradient step); shape [M] for M stacked modules."""
    return {name: jnp.full(shape, jnp.nan) for name in LEARNER_METRICS}


def period_row(learner_metrics: dict[str, Any], *, env_steps: Any, grad_steps: Any,
               target_update_freq: int, episodes: dict[str, Any], eval_return: Any,
               layout: AgentLayout | None = None,
               host_faults: dict[str, int] | None = None) -> dict[str, Any]:
    """One log period's metrics row.

    learner_metrics: LEARNER_METRICS averaged over the period ([] or [M] each).
    env_steps: env steps so far (each agent's own in a multi-agent run).
    grad_steps: gradient steps so far ([] or [M]).
    episodes: `EpisodeStats.summary()` (or the per-agent one).
    eval_return: the evaluation's mean return ([] or [N] per agent).
    layout: a multi-agent run's layout: learner statistics get a module axis [M] and
        `eval_return_sum` (over agents) is added. Values may be Python numbers (the host
        loop) or arrays (inside jit).
    host_faults: for envs on the host, `env_restarts` (envs rebuilt so far) and
        `eval_failures` (evaluation episodes dropped this period), added to the row.
    """
    if layout is not None:
        per_module = lambda x: jnp.reshape(x, (layout.num_modules,))  # noqa: E731
        learner_metrics = jax.tree.map(per_module, learner_metrics)
        grad_steps = per_module(grad_steps)
    row = {
        **learner_metrics,
        "env_steps": env_steps,
        "grad_steps": grad_steps,
        "target_updates": grad_steps // target_update_freq,
        **episodes,
        "eval_return": eval_return,
    }
    if layout is not None:
        row["eval_return_sum"] = jnp.sum(eval_return)
    return {**row, **(host_faults or {})}
