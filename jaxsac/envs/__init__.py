"""Environments: JAX-native ones (Pendulum-v1, MountainCarContinuous-v0, the multi-agent
MultiAgentPendulum-v1) and gymnasium.

    env = jaxsac.envs.make("Pendulum-v1", backend="jax")       # a JaxEnv (pure, vmappable)
    factory = jaxsac.envs.make("HalfCheetah-v5", backend="gymnasium")   # a GymEnvFactory
    state, obs = env.reset(key)
    state, obs, reward, terminated, truncated = env.step(state, action, key)

`backend="auto"` picks the JAX implementation when there is one (`has_jax_env`), else
gymnasium. JAX envs come wrapped in their registered time limit (truncation, never
termination); runners add NEXT_STEP autoreset (`AutoReset`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxsac.envs.core import AutoReset, AutoResetState, JaxEnv, TimeLimit, TimeLimitState
from jaxsac.envs.gym_adapter import (
    EnvFailureError,
    GymEnvFactory,
    RestartOnFailure,
    check_spaces,
    gym_env_factory,
)
from jaxsac.envs.mountain_car import MountainCarContinuous, MountainCarState
from jaxsac.envs.multi_agent import IndependentAgents, MultiAgentJaxEnv, MultiAgentPendulum
from jaxsac.envs.pendulum import Pendulum, PendulumState

# env id -> (constructor taking the env's own kwargs, max_episode_steps as registered
# in gymnasium).
JAX_ENVS: dict[str, tuple[Callable[..., JaxEnv], int]] = {
    "Pendulum-v1": (Pendulum, 200),
    "MountainCarContinuous-v0": (MountainCarContinuous, 999),
}
# multi-agent env id -> constructor taking num_agents and the env's own kwargs.
MULTI_AGENT_ENVS: dict[str, Callable[..., MultiAgentJaxEnv]] = {
    "MultiAgentPendulum-v1": MultiAgentPendulum,
}
BACKENDS = ("auto", "jax", "gymnasium")


def has_jax_env(env_id: str) -> bool:
    """Whether `env_id` has a JAX implementation (what `backend="auto"` then uses)."""
    return env_id in JAX_ENVS or env_id in MULTI_AGENT_ENVS


def is_multi_agent(env_id: str) -> bool:
    """Whether `env_id` is a multi-agent env (leading agent axis; JAX only)."""
    return env_id in MULTI_AGENT_ENVS


def make(env_id: str, backend: str = "auto", **kwargs: Any) -> JaxEnv | GymEnvFactory:
    """A JAX env (time-limited `JaxEnv`) or a gymnasium env factory for `env_id`.

    backend: "jax" (error if there is no JAX implementation), "gymnasium" (any
        registered gymnasium id, MuJoCo ones when `mujoco` is installed), or "auto".
    kwargs: the env's own arguments (e.g. `g=9.81` for Pendulum), plus
        `max_episode_steps` to override the registered time limit (and `num_agents` for
        a multi-agent env). For gymnasium they go to `gymnasium.make`.
    """
    if backend not in BACKENDS:
        raise ValueError(f"make: backend={backend!r} is invalid: must be one of {list(BACKENDS)}")
    if backend == "auto":
        backend = "jax" if has_jax_env(env_id) else "gymnasium"
    if is_multi_agent(env_id):
        if backend != "jax":
            raise ValueError(f"make: env_id={env_id!r} is a multi-agent JAX env: backend must "
                             f"be 'jax' or 'auto', got {backend!r}")
        return MULTI_AGENT_ENVS[env_id](**kwargs)
    if backend == "gymnasium":
        return gym_env_factory(env_id, **kwargs)
    if not has_jax_env(env_id):
        raise ValueError(
            f"make: env_id={env_id!r} has no JAX implementation; JAX envs: "
            f"{sorted(JAX_ENVS)} (use backend='gymnasium' or 'auto' for other ids)")
    constructor, max_episode_steps = JAX_ENVS[env_id]
    max_episode_steps = kwargs.pop("max_episode_steps", max_episode_steps)
    return TimeLimit(constructor(**kwargs), max_episode_steps)


__all__ = [
    "BACKENDS",
    "JAX_ENVS",
    "MULTI_AGENT_ENVS",
    "AutoReset",
    "AutoResetState",
    "EnvFailureError",
    "GymEnvFactory",
    "IndependentAgents",
    "JaxEnv",
    "MountainCarContinuous",
    "MountainCarState",
    "MultiAgentJaxEnv",
    "MultiAgentPendulum",
    "Pendulum",
    "PendulumState",
    "RestartOnFailure",
    "TimeLimit",
    "TimeLimitState",
    "check_spaces",
    "gym_env_factory",
    "has_jax_env",
    "is_multi_agent",
    "make",
]
