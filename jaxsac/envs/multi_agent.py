"""Multi-agent JAX envs: every array gets a leading agent axis N.

    env = jaxsac.envs.make("MultiAgentPendulum-v1", num_agents=2)
    state, obs = env.reset(key)                                    # obs [N, obs_dim]
    state, obs, reward, terminated, truncated, done = env.step(state, action, key)

`action` is [N, act_dim] in the env's units ([N] integers for Discrete actions);
`reward`, `terminated` and `truncated` are [N] (one per agent) and `done` [] is the
episode-level flag: every agent's episode ended at this step (RLlib's `"__all__"`).
`observation_space` and `action_space` are one agent's. Time limits stay per-agent
truncations; `done` never turns them into terminations.

`IndependentAgents(agent_env, num_agents)` makes N copies of a single-agent `JaxEnv` that
share no state: agent n resets and steps with its own key and its own time limit. Such an
env exposes `agent_env`, which is what the training runner steps: the agents of E env
copies become E·N columns of the single-agent runner, each with its own autoreset, so
agents reset independently (see docs/multi_agent.md).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium
import jax
import jax.numpy as jnp

from jaxsac import checks
from jaxsac.envs.cartpole import CartPole
from jaxsac.envs.core import JaxEnv, TimeLimit
from jaxsac.envs.pendulum import Pendulum


@runtime_checkable
class MultiAgentJaxEnv(Protocol):
    """What the multi-agent training path needs from an env (pure and vmappable)."""

    num_agents: int
    agent_env: JaxEnv  # the env one agent plays (agents share no state)
    max_episode_steps: int
    observation_space: gymnasium.spaces.Box
    action_space: gymnasium.spaces.Space

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]: ...

    def step(self, state: Any, action: jax.Array, key: jax.Array) -> tuple[
        Any, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]: ...


class IndependentAgents:
    """`num_agents` independent copies of `agent_env` (a time-limited `JaxEnv`).

    reset(key) -> (state [N, ...], obs [N, obs_dim]); agent n uses `split(key, N)[n]`.
    step(state, action [N, act_dim], key) -> (state, obs [N, obs_dim], reward [N],
        terminated [N], truncated [N], done []); done = all agents' episodes ended at
        this step. Stepping an agent after its episode ended is the caller's business
        (the training runner resets it first; evaluation ignores its later rewards).
    """

    def __init__(self, agent_env: TimeLimit, num_agents: int):
        checks.check_int("IndependentAgents", "num_agents", num_agents, 1)
        self.agent_env = agent_env
        self.num_agents = num_agents
        self.max_episode_steps = agent_env.max_episode_steps
        self.observation_space = agent_env.observation_space
        self.action_space = agent_env.action_space

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        return jax.vmap(self.agent_env.reset)(jax.random.split(key, self.num_agents))

    def step(self, state: Any, action: jax.Array, key: jax.Array):
        state, obs, reward, terminated, truncated = jax.vmap(self.agent_env.step)(
            state, action, jax.random.split(key, self.num_agents))
        done = jnp.all(jnp.logical_or(terminated, truncated))
        return state, obs, reward, terminated, truncated, done

    def __repr__(self) -> str:
        return f"IndependentAgents({self.agent_env!r}, num_agents={self.num_agents})"


def MultiAgentPendulum(num_agents: int = 2, max_episode_steps: int = 200,  # noqa: N802
                       g: float = 10.0) -> IndependentAgents:
    """RLlib's multi-agent Pendulum: `num_agents` independent Pendulum-v1 copies, each
    truncated after `max_episode_steps` steps of its own."""
    return IndependentAgents(TimeLimit(Pendulum(g), max_episode_steps), num_agents)


def MultiAgentCartPole(num_agents: int = 2, max_episode_steps: int = 500  # noqa: N802
                       ) -> IndependentAgents:
    """RLlib's multi-agent CartPole: `num_agents` independent CartPole-v1 copies (Discrete
    actions), each truncated after `max_episode_steps` steps of its own."""
    return IndependentAgents(TimeLimit(CartPole(), max_episode_steps), num_agents)
