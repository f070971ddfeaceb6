"""How a multi-agent run maps agents to modules: the layout of its runner columns and
the single-agent config each module trains with.

The runner steps the N agents of E env copies as E·N columns of the single-agent JAX
runner (column e·N + n is agent n of copy e). With policy_mapping "independent" module
m trains on agent m's E columns (M = N modules, stacked along a leading module axis);
with "shared" one module trains on all E·N columns, which is single-agent training with
num_envs = E·N (no module axis). Step counts of a multi-agent config count each agent's
own env steps; `module_config` gives the counts one module sees.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxsac.config import ENV_STEP_COUNT, SACConfig, fields_with

SCALED_COUNTS = fields_with(ENV_STEP_COUNT)
"""SACConfig fields counted in env steps: per agent in a config, per module in
`module_config` (multiplied by num_agents for a shared module)."""


class AgentLayout(NamedTuple):
    """How the E·N runner columns map to modules.

    num_agents: N. num_envs: E, copies of the multi-agent env.
    num_modules: M, N for "independent", 1 for "shared".
    """

    num_agents: int
    num_envs: int
    num_modules: int

    @classmethod
    def from_config(cls, config: SACConfig) -> AgentLayout:
        return cls(config.num_agents, config.num_envs, config.num_modules)

    def to_modules(self, columns: Any) -> Any:
        """Leaves [E·N, ...] (env-major columns) -> [M, E, ...]; unchanged for M = 1."""
        if self.num_modules == 1:
            return columns
        return jax.tree.map(lambda x: jnp.swapaxes(
            x.reshape(-1, self.num_agents, *x.shape[1:]), 0, 1), columns)

    def from_modules(self, per_module: Any) -> Any:
        """Inverse of `to_modules`: leaves [M, E, ...] -> [E·N, ...]."""
        if self.num_modules == 1:
            return per_module
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]),
                            per_module)

    def module_keys(self, key: jax.Array) -> jax.Array:
        """[M] keys, one per module (the key itself for one module)."""
        return key if self.num_modules == 1 else jax.random.split(key, self.num_modules)


def module_config(config: SACConfig) -> SACConfig:
    """The single-agent config one module trains with (counts per module)."""
    if config.policy_mapping == "independent":
        return config.replace(num_agents=1)
    scale = config.num_agents
    return config.replace(num_agents=1, num_envs=config.num_envs * scale,
                          **{name: getattr(config, name) * scale for name in SCALED_COUNTS})
