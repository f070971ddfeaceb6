"""Environments: JAX-native ones (Pendulum-v1, its image-observation version
PendulumPixels-v1 and MountainCarContinuous-v0 with Box actions, CartPole-v1 and
Acrobot-v1 with Discrete actions, the multi-agent
MultiAgentPendulum-v1 and MultiAgentCartPole-v1, and MuJoCo Playground's tasks as
"playground/<task>", e.g. "playground/CheetahRun") and gymnasium.

    env = jaxsac.envs.make("Pendulum-v1", backend="jax")       # a JaxEnv (pure, vmappable)
    factory = jaxsac.envs.make("HalfCheetah-v5", backend="gymnasium")   # a GymEnvFactory
    state, obs = env.reset(key)
    state, obs, reward, terminated, truncated = env.step(state, action, key)

`backend="auto"` picks the JAX implementation when there is one (`has_jax_env`), else
gymnasium. JAX envs come wrapped in their registered time limit (truncation, never
termination); runners add NEXT_STEP autoreset (`AutoReset`).

Envs from pixels on gymnasium: Atari games as "ALE/<Game>-v5" (ale-py with gymnasium's
AtariPreprocessing: [84, 84, 1] uint8 frames; jaxsac.envs.atari) and DeepMind Control
tasks as "dmc/<domain>-<task>" or "dmc/<domain>-<task>-pixels" ([84, 84, 3] uint8,
with action repeat; jaxsac.envs.dmc).

Envs of one's own: a JAX env with `register_jax_env(env_id, constructor, ...)`, any
gymnasium env (wrappers included) built by a callable with `register_gym_env(env_id,
factory)`. A run's env is `from_config(config)`: `config.env_id` made with
`config.env_kwargs`, the one place a run's env is built (evaluation's with
`evaluation=True`: `config.eval_env_id` and `config.eval_env_kwargs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium

from jaxsac import checks
from jaxsac.config import BACKENDS, SACConfig
from jaxsac.envs import playground
from jaxsac.envs.acrobot import Acrobot, AcrobotState
from jaxsac.envs.atari import ATARI_EXTRA, is_atari
from jaxsac.envs.cartpole import CartPole, CartPoleState
from jaxsac.envs.core import AutoReset, AutoResetState, JaxEnv, TimeLimit, TimeLimitState
from jaxsac.envs.dmc import DMC_EXTRA, dmc_time_limit, is_dmc
from jaxsac.envs.gym_adapter import (
    GYM_FACTORIES,
    CheckData,
    EnvDataError,
    EnvFailureError,
    GymEnvFactory,
    RestartOnFailure,
    check_observation_space,
    gym_env_factory,
    register_gym_env,
    source_spec,
)
from jaxsac.envs.mountain_car import MountainCarContinuous, MountainCarState
from jaxsac.envs.multi_agent import (
    IndependentAgents,
    MultiAgentCartPole,
    MultiAgentJaxEnv,
    MultiAgentPendulum,
)
from jaxsac.envs.pendulum import Pendulum, PendulumState
from jaxsac.envs.pendulum_pixels import PendulumPixels
from jaxsac.envs.playground import (
    PLAYGROUND_EXTRA,
    PLAYGROUND_PREFIX,
    PlaygroundEnv,
    check_playground_installed,
    is_playground,
    make_playground,
)
from jaxsac.frames import check_frame_stack
from jaxsac.observations import obs_spec

# env id -> (constructor taking the env's own kwargs, max_episode_steps as registered
# in gymnasium).
JAX_ENVS: dict[str, tuple[Callable[..., JaxEnv], int]] = {
    "Pendulum-v1": (Pendulum, 200),
    "PendulumPixels-v1": (PendulumPixels, 200),
    "MountainCarContinuous-v0": (MountainCarContinuous, 999),
    "CartPole-v1": (CartPole, 500),
    "Acrobot-v1": (Acrobot, 500),
}
# multi-agent env id -> constructor taking num_agents and the env's own kwargs.
MULTI_AGENT_ENVS: dict[str, Callable[..., MultiAgentJaxEnv]] = {
    "MultiAgentPendulum-v1": MultiAgentPendulum,
    "MultiAgentCartPole-v1": MultiAgentCartPole,
}


def register_jax_env(env_id: str, constructor: Callable[..., JaxEnv],
                     max_episode_steps: int) -> None:
    """Add a JAX env source: `make(env_id)` (and `SACConfig(env_id=env_id)`, on the JAX
    backend inside the compiled program) then builds `constructor(**kwargs)` wrapped in a
    time limit of `max_episode_steps`. The env follows the `JaxEnv` protocol (pure,
    vmappable reset and step, a gymnasium Box observation space or a Dict of Boxes). An id
    gymnasium knows too then runs on the JAX backend under `backend="auto"`, as jaxsac's
    own JAX versions of gymnasium's envs do. The registry lives in this process: register
    before building a run or loading its checkpoint; registering an id again replaces
    its constructor."""
    owner = "register_jax_env"
    if not isinstance(env_id, str) or not env_id:
        checks.fail(owner, "env_id", env_id, "a non-empty string")
    if env_id in JAX_ENVS and is_jaxsac_code(env_id) or env_id in MULTI_AGENT_ENVS \
            or is_playground(env_id) or env_id in GYM_FACTORIES:
        checks.fail(owner, "env_id", env_id, "an id that is not one of jaxsac's own envs, "
                    "a MuJoCo Playground task or a factory of register_gym_env")
    if not callable(constructor):
        checks.fail(owner, "constructor", constructor, "callable (**kwargs) -> JaxEnv")
    checks.check_int(owner, "max_episode_steps", max_episode_steps, 1)
    JAX_ENVS[env_id] = (constructor, int(max_episode_steps))


def register_multi_agent_env(env_id: str, constructor: Callable[..., JaxEnv],
                             max_episode_steps: int) -> None:
    """Add a multi-agent JAX env source of agents that share no state: `make(env_id,
    num_agents=N, **kwargs)` (and `SACConfig(env_id=env_id, num_agents=N)`) then builds
    `IndependentAgents(TimeLimit(constructor(**kwargs), max_episode_steps), N)`. The
    agent's env follows the `JaxEnv` protocol (a Box observation space or a Dict of
    Boxes); every agent has its spaces. The registry lives in this process, as
    `register_jax_env`'s."""
    owner = "register_multi_agent_env"
    if not isinstance(env_id, str) or not env_id:
        checks.fail(owner, "env_id", env_id, "a non-empty string")
    if env_id in JAX_ENVS or env_id in MULTI_AGENT_ENVS and is_jaxsac_code(env_id) \
            or is_playground(env_id) or env_id in GYM_FACTORIES:
        checks.fail(owner, "env_id", env_id, "an id that is not one of jaxsac's own envs, "
                    "a single-agent JAX env, a MuJoCo Playground task or a factory of "
                    "register_gym_env")
    if not callable(constructor):
        checks.fail(owner, "constructor", constructor, "callable (**kwargs) -> JaxEnv")
    steps = checks.check_int(owner, "max_episode_steps", max_episode_steps, 1)
    # A partial, not a closure: its module is not jaxsac's, so its programs are not kept
    # (`is_jaxsac_code`).
    MULTI_AGENT_ENVS[env_id] = functools.partial(_independent_agents, constructor, steps)


def _independent_agents(constructor: Callable[..., JaxEnv], default_steps: int,
                        num_agents: int = 2, max_episode_steps: int | None = None,
                        **kwargs: Any) -> IndependentAgents:
    """N agents of `constructor(**kwargs)`, each truncated after max_episode_steps
    (default_steps when None)."""
    steps = default_steps if max_episode_steps is None else max_episode_steps
    return IndependentAgents(TimeLimit(constructor(**kwargs), steps), num_agents)


def has_jax_env(env_id: str) -> bool:
    """Whether `env_id` has a JAX implementation (what `backend="auto"` then uses)."""
    return env_id in JAX_ENVS or env_id in MULTI_AGENT_ENVS or is_playground(env_id)


def max_episode_steps(env_id: str, kwargs: dict[str, Any] | None = None) -> int | None:
    """The time limit of `env_id` made with `kwargs`: their max_episode_steps, else the
    one it is registered with (gymnasium's, which the JAX envs share, or
    `register_gym_env`'s); None when it has none or is unknown."""
    if (kwargs or {}).get("max_episode_steps") is not None:
        return int(kwargs["max_episode_steps"])
    if env_id in GYM_FACTORIES:
        return GYM_FACTORIES[env_id].max_episode_steps
    if is_dmc(env_id):
        return dmc_time_limit(kwargs)
    if is_atari(env_id):
        return None  # ale-py's own limit, in emulator frames
    if env_id in JAX_ENVS:
        return JAX_ENVS[env_id][1]
    if is_playground(env_id):
        return playground.episode_length(env_id)
    try:
        return gymnasium.spec(env_id).max_episode_steps
    except gymnasium.error.Error:
        return None


def is_jaxsac_code(env_id: str) -> bool:
    """Whether `env_id`'s JAX env is one jaxsac defines, so its code is jaxsac's own: not
    a Playground task, nor a class added to JAX_ENVS or MULTI_AGENT_ENVS from outside."""
    constructor = JAX_ENVS[env_id][0] if env_id in JAX_ENVS else MULTI_AGENT_ENVS.get(env_id)
    return constructor is not None and constructor.__module__.startswith("jaxsac.")


def is_registered_by_user(env_id: str) -> bool:
    """Whether `env_id` is a JAX env added with `register_jax_env` (its code is not
    jaxsac's and may be registered again with other code)."""
    return env_id in JAX_ENVS and not is_jaxsac_code(env_id)


def is_multi_agent(env_id: str) -> bool:
    """Whether `env_id` is a multi-agent env (leading agent axis; JAX only)."""
    return env_id in MULTI_AGENT_ENVS


def resolve_backend(env_id: str, backend: str = "auto", owner: str = "make") -> str:
    """The backend a run of `env_id` uses, "jax" or "gymnasium": the one place that
    decides it.

    backend: "jax" (an error when `env_id` has no JAX implementation), "gymnasium" (an
    error for a multi-agent env, which is JAX only) or "auto" (JAX when `env_id` has a
    JAX implementation, else gymnasium).
    owner: whose argument `backend` is, for the error ("make", "SACConfig", ...).
    """
    checks.check_choice(owner, "backend", backend, BACKENDS)
    if is_playground(env_id):
        playground.task_name(env_id, owner)
        if backend == "gymnasium":
            checks.fail(owner, "backend", backend, f"'jax' or 'auto' for env_id={env_id!r}, "
                        "a MuJoCo Playground task (JAX only)")
        return "jax"
    if env_id in GYM_FACTORIES and backend == "jax":
        checks.fail(owner, "backend", backend, f"'gymnasium' or 'auto' for env_id={env_id!r}, "
                    "a gymnasium factory of register_gym_env")
    if backend == "auto":
        return "jax" if has_jax_env(env_id) else "gymnasium"
    if backend == "jax" and not has_jax_env(env_id):
        checks.fail(owner, "backend", backend,
                    f"'gymnasium' or 'auto' for env_id={env_id!r}, which has no JAX "
                    f"implementation; JAX envs: {sorted([*JAX_ENVS, *MULTI_AGENT_ENVS])} and "
                    f"MuJoCo Playground's tasks as '{PLAYGROUND_PREFIX}<task>'")
    if backend == "gymnasium" and is_multi_agent(env_id):
        checks.fail(owner, "backend", backend, f"'jax' or 'auto' for env_id={env_id!r}, a "
                    "multi-agent JAX env (backend must be 'jax' or 'auto')")
    return backend


def make(env_id: str, backend: str = "auto", obs_keys: tuple[str, ...] | None = None,
         **kwargs: Any) -> JaxEnv | GymEnvFactory:
    """A JAX env (time-limited `JaxEnv`) or a gymnasium env factory for `env_id`.

    backend: "jax" (error if there is no JAX implementation), "gymnasium" (any
        registered gymnasium id, MuJoCo ones when `mujoco` is installed), or "auto".
    obs_keys: the keys of a dict observation that make up the flat observation, in that
        order (None: all of them, sorted); Playground tasks only.
    kwargs: the env's own arguments (e.g. `g=9.81` for Pendulum; `impl="warp"` for a
        Playground task), plus `max_episode_steps` to override the registered time limit
        (and `num_agents` for a multi-agent env). For gymnasium they go to `gymnasium.make`.
    """
    backend = resolve_backend(env_id, backend)
    if is_playground(env_id):
        return make_playground(env_id, obs_keys, **kwargs)
    if obs_keys is not None:
        checks.fail("make", "obs_keys", obs_keys, f"None for env_id={env_id!r}, whose "
                    "observation is an array (obs_keys select a Playground task's dict "
                    "observation)")
    if backend == "gymnasium":
        return gym_env_factory(env_id, **kwargs)
    if is_multi_agent(env_id):
        return MULTI_AGENT_ENVS[env_id](**kwargs)
    constructor, max_episode_steps = JAX_ENVS[env_id]
    max_episode_steps = kwargs.pop("max_episode_steps", max_episode_steps)
    return TimeLimit(constructor(**kwargs), max_episode_steps)


def from_config(config: SACConfig, evaluation: bool = False) -> JaxEnv | GymEnvFactory:
    """The env `config` trains on (`evaluation`: the one it evaluates on), on its
    backend: `envs.make` of the env id with the config's env kwargs (and obs_keys and
    domain_randomization when set, or num_agents for a multi-agent env)."""
    env_id, kwargs = config.eval_env if evaluation else (config.env_id, config.env_kwargs)
    backend = resolve_backend(env_id, config.backend, owner="SACConfig")
    if is_multi_agent(env_id):
        return make(env_id, backend, num_agents=config.num_agents, **kwargs)
    if config.domain_randomization:  # only Playground tasks take it
        kwargs = {**kwargs, "domain_randomization": True}
    return make(env_id, backend, obs_keys=config.obs_keys, **kwargs)


def check_config_envs(config: SACConfig) -> None:
    """Errors naming the field for env kwargs an env does not take, for a frame stack
    of an observation without an image, and for an evaluation env whose spaces are not
    the training env's (a gymnasium env is built once here)."""
    spaces = []
    separate = config.eval_env != (config.env_id, config.env_kwargs)
    for evaluation in (False, True) if separate else (False,):
        name = "eval_env_kwargs" if evaluation and config.eval_env_kwargs is not None \
            else "env_kwargs"
        env_id, kwargs = config.eval_env if evaluation else (config.env_id, config.env_kwargs)
        try:
            env = from_config(config, evaluation)
            spaces.append((env.observation_space.shape, env.action_space))
        except TypeError as e:  # an argument the env's constructor does not take
            checks.fail("SACConfig", name, kwargs, f"arguments env_id={env_id!r} takes ({e})")
        if not evaluation and not is_multi_agent(env_id):  # an image to stack
            check_frame_stack("SACConfig", config.frame_stack, obs_spec(
                env.observation_space, f"env {env_id!r}"))
    if separate and spaces[0] != spaces[1]:
        (obs, act), (eval_obs, eval_act) = spaces
        checks.fail("SACConfig", "eval_env_id", config.eval_env_id,
                    f"an env with the training env's spaces (observations of shape {obs}, "
                    f"actions {act}); the evaluation env {config.eval_env} has "
                    f"observations of shape {eval_obs}, actions {eval_act}")


def time_limit(config: SACConfig, evaluation: bool = False) -> int | None:
    """`max_episode_steps` of `config`'s env (`evaluation`: its evaluation env)."""
    return max_episode_steps(*(config.eval_env if evaluation
                               else (config.env_id, config.env_kwargs)))


__all__ = [
    "ATARI_EXTRA",
    "DMC_EXTRA",
    "BACKENDS",
    "GYM_FACTORIES",
    "JAX_ENVS",
    "MULTI_AGENT_ENVS",
    "Acrobot",
    "AcrobotState",
    "AutoReset",
    "AutoResetState",
    "CartPole",
    "CartPoleState",
    "CheckData",
    "EnvDataError",
    "EnvFailureError",
    "GymEnvFactory",
    "IndependentAgents",
    "JaxEnv",
    "MountainCarContinuous",
    "MountainCarState",
    "MultiAgentCartPole",
    "MultiAgentJaxEnv",
    "MultiAgentPendulum",
    "PLAYGROUND_EXTRA",
    "PLAYGROUND_PREFIX",
    "Pendulum",
    "PendulumPixels",
    "PendulumState",
    "PlaygroundEnv",
    "RestartOnFailure",
    "TimeLimit",
    "TimeLimitState",
    "check_config_envs",
    "check_observation_space",
    "check_playground_installed",
    "gym_env_factory",
    "from_config",
    "has_jax_env",
    "is_jaxsac_code",
    "is_multi_agent",
    "is_playground",
    "is_registered_by_user",
    "make",
    "make_playground",
    "max_episode_steps",
    "register_gym_env",
    "register_jax_env",
    "register_multi_agent_env",
    "source_spec",
    "resolve_backend",
    "time_limit",
]
