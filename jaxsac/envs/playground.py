"""MuJoCo Playground tasks (MJX physics) behind the JaxEnv protocol.

    env = jaxsac.envs.make("playground/CartpoleBalance")   # TimeLimit(PlaygroundEnv)
    config = jaxsac.SACConfig(env_id="playground/CheetahRun", num_envs=128, ...)

Ids are "playground/<task>", <task> one of MuJoCo Playground's registry
(`mujoco_playground.registry.ALL_ENVS`; the dm_control suite ones need no download).
Needs the optional extra `pip install -e '.[playground]'` (mujoco, mujoco-mjx,
playground); `import jaxsac` does not import it. The locomotion and manipulation tasks
also need MuJoCo Menagerie's robots, `pip install -e '.[locomotion]'`
(jaxsac.envs.menagerie).

Episode ends, the way jaxsac's runners need them (not brax's training wrappers):
- Playground's `done` (a physics end, e.g. NaN state or a fallen pole) is `terminated`;
- the task's `episode_length` is a `TimeLimit`, so a time-limit end is `truncated` and
  its observation is the true final one. brax's auto-reset wrapper would overwrite it
  with the next episode's first observation; jaxsac's NEXT_STEP autoreset resets on
  the following step instead.

Observations: an array observation is flattened (a Box); a dict one (e.g. {"state": ...,
"privileged_state": ...}) stays a dict (a gymnasium Dict of Boxes), of the entries named
by `obs_keys` (all of them when None); the "flat" encoder concatenates its entries in
sorted key order, and `SACConfig.actor_obs_keys` / `critic_obs_keys` give the actor and
the critics each their own entries (asymmetric actor-critic). Actions: the Box of the
actuators' control ranges when the action is the control vector (every dm_control
suite task); otherwise Playground's convention for actions that are not raw controls,
[-1, 1] per dimension (the locomotion and manipulation tasks, SCALED_ACTION_FAMILIES).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
from collections.abc import Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks
from jaxsac.envs import menagerie, randomization
from jaxsac.envs.core import TimeLimit

PLAYGROUND_PREFIX = "playground/"
PLAYGROUND_EXTRA = "pip install -e '.[playground]'"
DEFAULT_IMPL = "jax"
"""MJX implementation the tasks are loaded with: "jax" runs on every JAX backend (CPU,
GPU, TPU); Playground's own default, "warp", needs an NVIDIA GPU."""


def is_playground(env_id: str) -> bool:
    """Whether `env_id` names a Playground task ("playground/<task>")."""
    return isinstance(env_id, str) and env_id.startswith(PLAYGROUND_PREFIX)


def check_playground_installed(owner: str) -> None:
    """Raises ImportError naming the extra when MuJoCo Playground cannot be imported."""
    if importlib.util.find_spec("mujoco_playground") is None:
        raise ImportError(f"{owner} needs MuJoCo Playground, which is not installed: "
                          f"{PLAYGROUND_EXTRA} (mujoco, mujoco-mjx and playground)")


@functools.cache
def _registry() -> Any:
    check_playground_installed("a playground/<task> env")
    if importlib.util.find_spec("warp") is not None:  # quiet its start-up banner
        importlib.import_module("warp").config.quiet = True
    return importlib.import_module("mujoco_playground").registry


def task_name(env_id: str, owner: str = "make") -> str:
    """The Playground task of "playground/<task>", checked against Playground's registry
    (errors name `owner`'s env_id, the extra when missing, and the known tasks)."""
    check_playground_installed(f"env_id={env_id!r}")
    task = env_id[len(PLAYGROUND_PREFIX):]
    known = tuple(_registry().ALL_ENVS)
    if task not in known:
        checks.fail(owner, "env_id", env_id,
                    f"'playground/<task>' with a MuJoCo Playground task, one of "
                    f"{[PLAYGROUND_PREFIX + name for name in known]}")
    return task


def episode_length(env_id: str) -> int:
    """The task's time limit in env steps (its config's `episode_length`)."""
    return int(_registry().get_default_config(task_name(env_id)).episode_length)


def select_observation(obs: Any, obs_keys: tuple[str, ...] | None, owner: str) -> Any:
    """One env's observation as jaxsac keeps it: an array flattened to float32 [obs_dim],
    or a dict's entries named by `obs_keys` (all when None), each as it is."""
    if not isinstance(obs, Mapping):
        if obs_keys is not None:
            checks.fail(owner, "obs_keys", obs_keys,
                        "None: the env's observation is an array, not a dict")
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)
    keys = tuple(sorted(obs)) if obs_keys is None else obs_keys
    missing = [k for k in keys if k not in obs]
    if missing or not keys:
        checks.fail(owner, "obs_keys", obs_keys,
                    f"a non-empty tuple of the observation's keys {sorted(obs)}"
                    + (f" (no key {missing[0]!r})" if missing else ""))
    return {k: obs[k] for k in keys}


def _observation_space(abstract_obs: Any) -> gymnasium.Space:
    """A Box of the flat observation, or a Dict of unbounded Boxes of a dict's entries."""
    if not isinstance(abstract_obs, Mapping):
        return gymnasium.spaces.Box(-np.inf, np.inf, shape=abstract_obs.shape,
                                    dtype=np.float32)
    return gymnasium.spaces.Dict({k: gymnasium.spaces.Box(-np.inf, np.inf, shape=x.shape,
                                                          dtype=x.dtype)
                                  for k, x in abstract_obs.items()})


SCALED_ACTION_FAMILIES = ("mujoco_playground._src.locomotion",
                          "mujoco_playground._src.manipulation")
"""Playground's task families whose action is not the control vector: a task scales its
[-1, 1] action into position targets around a default pose (locomotion) or into
control increments (manipulation), as Playground's brax training feeds them."""


def _action_space(env: Any) -> gymnasium.spaces.Box:
    model = env.mj_model
    is_control = (env.action_size == model.nu and bool(np.all(model.actuator_ctrllimited))
                  and not type(env).__module__.startswith(SCALED_ACTION_FAMILIES))
    if is_control:
        low, high = np.asarray(model.actuator_ctrlrange, np.float32).T
    else:
        low = -np.ones(env.action_size, np.float32)
        high = np.ones(env.action_size, np.float32)
    return gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)


class PlaygroundEnv:
    """A Playground `MjxEnv` as a JaxEnv (no time limit; `make` adds the task's).

    obs [obs_dim] float32 or a dict (see `select_observation`), action [action_size] in
    `action_space` units, reward [] float32, terminated [] bool (Playground's `done`),
    truncated [] bool (always False here). The state is Playground's own `State`; the
    step key is unused (a task draws its own randomness from the state's rng).
    """

    def __init__(self, env: Any, obs_keys: tuple[str, ...] | None = None,
                 name: str = "playground"):
        self.env = env
        self.name = name
        self.obs_keys = None if obs_keys is None else tuple(obs_keys)
        abstract = jax.eval_shape(env.reset, jax.random.key(0))
        kept = jax.eval_shape(
            lambda o: select_observation(o, self.obs_keys, f"PlaygroundEnv({name})"),
            abstract.obs)
        self.observation_space = _observation_space(kept)
        self.action_space = _action_space(env)

    def _obs(self, state: Any) -> jax.Array:
        return select_observation(state.obs, self.obs_keys, f"PlaygroundEnv({self.name})")

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        state = self.env.reset(key)
        return state, self._obs(state)

    def step(self, state: Any, action: jax.Array, key: jax.Array):
        del key
        state = self.env.step(state, jnp.asarray(action, jnp.float32))
        terminated = state.done > 0
        return (state, self._obs(state), jnp.asarray(state.reward, jnp.float32), terminated,
                jnp.zeros((), bool))

    def __repr__(self) -> str:
        return f"PlaygroundEnv({self.name!r}, obs_keys={self.obs_keys})"


def domain_randomizer(env_id: str, owner: str = "make") -> randomization.Randomizer:
    """Playground's domain randomizer of `env_id`'s task (what its training passes brax as
    `randomization_fn`); an error naming `owner`'s `domain_randomization` when the env
    has none."""
    if not is_playground(env_id):
        checks.fail(owner, "domain_randomization", True,
                    f"False for env_id={env_id!r}, which is not a MuJoCo Playground task")
    task = task_name(env_id, owner)
    randomizers = _domain_randomizers()
    if task not in randomizers:
        checks.fail(owner, "domain_randomization", True,
                    f"False for env_id={env_id!r}, whose task has no domain randomizer in "
                    f"Playground; tasks with one: {sorted(randomizers)}")
    return randomizers[task]


@functools.cache
def _domain_randomizers() -> dict[str, randomization.Randomizer]:
    """Task -> Playground's randomizer, for the tasks that have one."""
    registry = _registry()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints for the tasks without
        found = {task: registry.get_domain_randomizer(task) for task in registry.ALL_ENVS}
    return {task: randomizer for task, randomizer in found.items() if randomizer is not None}


def make_playground(env_id: str, obs_keys: tuple[str, ...] | None = None,
                    impl: str = DEFAULT_IMPL, max_episode_steps: int | None = None,
                    domain_randomization: bool = False
                    ) -> TimeLimit | randomization.DomainRandomized:
    """`env_id`'s task ("playground/<task>") in its time limit (`max_episode_steps`
    overrides the task's episode_length). `impl`: the MJX implementation, "jax" (any
    backend) or "warp" (NVIDIA GPUs). `domain_randomization`: each env steps its own
    model, drawn by the task's Playground randomizer (jaxsac.envs.randomization)."""
    task = task_name(env_id)
    checks.check_choice("make", "impl", impl, ("jax", "warp"))
    checks.check_bool("make", "domain_randomization", domain_randomization)
    env = TimeLimit(_playground_env(task, obs_keys, impl),
                    max_episode_steps or episode_length(env_id))
    if domain_randomization:
        return randomization.DomainRandomized(env, domain_randomizer(env_id))
    return env


@functools.lru_cache(maxsize=16)
def _playground_env(task: str, obs_keys: tuple[str, ...] | None, impl: str) -> PlaygroundEnv:
    env = menagerie.load_task(_registry(), task, {"impl": impl})
    return PlaygroundEnv(env, obs_keys, name=task)
