"""The trained policy as a plain function: `load_policy(directory)` -> obs -> env action.

    policy = jaxsac.load_policy("runs/pendulum/checkpoints")
    action = policy(obs)              # numpy, in the env's action Box: the mode
    action = policy.sample(key, obs)  # a draw from the stochastic policy
    policy = jaxsac.Policy.from_state(result.config, result.state)   # no checkpoint

Works in a fresh process: everything it needs (config, observation statistics, env
action bounds) is in the checkpoint. It opens the step with `checkpoint.open_step`, as
`checkpoint.restore` does, and reads only the actor's parameters and the observation
statistics of the entries the actor reads (`SACConfig.actor_obs_keys`: an asymmetric
actor-critic's policy acts on what the robot senses alone, e.g. {"state": ...}).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from jaxsac import checkpoint, checks, connectors, envs, runs, storage
from jaxsac.assembly import deterministic_policy, sampling_policy
from jaxsac.config import SACConfig
from jaxsac.frames import FrameStack
from jaxsac.observations import ObsSpec, obs_spec


class Policy:
    """The policy of a checkpoint (or of a state): obs -> env action (numpy).

    `policy(obs)` acts deterministically, `policy.sample(key, obs)` draws from the
    stochastic policy π(·|s) SAC trains (each observation of a batch its own draw).
    obs: one observation [*obs_shape] or a batch [B, *obs_shape]; for a Dict observation
    space a dict holding (at least) the entries the actor reads, each [*shape] or
    [B, *shape]. Returns env actions:
    for a Box, tanh(μ) (deterministic) or tanh(μ + σ·ε) rescaled to the env's action
    Box, [*act_shape] or [B, *act_shape]; for a Discrete action space the argmax of the
    logits (deterministic) or a categorical draw, as an integer [] or [B] (int64, offset
    by the space's `start`).
    With a frame stack (`config.frame_stack` k > 1) the policy reads each image entry as
    its episode's last k frames, [H, W, C·k] oldest first (`acting_spec`): pass such
    stacks, or act through `policy.episode()`, which keeps them from the env's frames.
    Attributes: config, step, actor_params, obs_stats (observation statistics),
    obs_spec (the run's observations), actor_spec (the entries the actor reads),
    acting_spec (those entries as the policy reads them, through the frame stack).
    """

    def __init__(self, config: SACConfig, step: int, actor_params: Any, obs_stats: Any,
                 meta: dict[str, Any]):
        self.config, self.step = config, step
        self.obs_spec = ObsSpec.from_metadata(meta)
        self.actor_spec = self.obs_spec.select(config.actor_obs_keys, "Policy",
                                               "config.actor_obs_keys")
        self.acting_spec = self.actor_spec.stacked(config.frame_stack)
        self.actor_params = actor_params
        self.obs_stats = connectors.select_stats(obs_stats, self.actor_spec.keys)
        self.obs_shape = None if meta["obs_shape"] is None else tuple(meta["obs_shape"])
        self.actions = connectors.actions_from_metadata(meta)
        self._act = deterministic_policy(config, self.obs_spec, self.actions)
        self._sample = sampling_policy(config, self.obs_spec, self.actions)

    @classmethod
    def from_state(cls, config: SACConfig, state: Any, seed_index: int = 0) -> Policy:
        """The policy of a single-agent run's TrainState (`train(...).state`; its
        `seed_index`'s when it has a seed axis) without a checkpoint. The env is built
        once (`envs.from_config`) for its spaces."""
        if envs.is_multi_agent(config.env_id):
            checks.fail("Policy.from_state", "config.env_id", config.env_id,
                        "a single-agent env (load a multi-agent run's module with "
                        "load_policy(..., module_id=))")
        seeds = np.shape(state.iteration)[0] if np.ndim(state.iteration) else 1
        if not checks.is_int(seed_index) or not 0 <= seed_index < seeds:
            checks.fail("Policy.from_state", "seed_index", seed_index,
                        f"in [0, {seeds}): the state holds {seeds} seed(s)")
        pick = (lambda x: x[seed_index]) if np.ndim(state.iteration) else (lambda x: x)
        env = envs.from_config(config)
        stats = state.runner if envs.resolve_backend(config.env_id, config.backend) != "jax" \
            else state.runner.obs_norm
        space = env.observation_space
        meta = {"obs_shape": None if space.shape is None else list(space.shape),
                **obs_spec(space, "Policy.from_state").metadata(),
                **connectors.module_actions(env.action_space, "Policy.from_state").metadata()}
        step = int(pick(np.asarray(state.iteration))) * config.num_envs
        return cls(config, step, jax.tree.map(pick, state.learner.actor_params),
                   jax.tree.map(pick, stats), meta)

    def _batch(self, obs: Any, spec: ObsSpec | None = None) -> tuple[Any, bool]:
        """(observations [B, ...] of `spec` (None: `acting_spec`, what the actor reads):
        flattened [B, obs_dim], images [B, H, W, C], or the actor's entries of a dict;
        whether `obs` was one observation)."""
        spec = self.acting_spec if spec is None else spec
        if spec.is_dict:
            return _dict_batch(spec, obs)
        if spec.is_image_array:
            return _image_batch(spec.shapes[0], obs)
        obs = np.asarray(obs, np.float32)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(f"Policy: obs of shape {obs.shape}; expected {self.obs_shape} "
                             f"or (B, {', '.join(map(str, self.obs_shape))})")
        return connectors.flatten_obs(obs[None] if single else obs), single

    def _to_env(self, action: Any, single: bool) -> np.ndarray:
        env_action = self.actions.to_env(np.asarray(action).astype(self.actions.host_dtype))
        return env_action[0] if single else env_action

    def __call__(self, obs: Any) -> np.ndarray:
        """The deterministic action (the mode) for `obs`."""
        batch, single = self._batch(obs)
        return self._to_env(self._act(self.actor_params, self.obs_stats, batch), single)

    def sample(self, key: jax.Array, obs: Any) -> np.ndarray:
        """An action drawn from π(·|obs) with `key` (a `jax.random.key`): the same key
        and obs give the same action."""
        if not isinstance(key, jax.Array) or key.shape != () and key.shape != (2,):
            checks.fail("Policy.sample", "key", key, "one jax.random.key (or PRNGKey)")
        batch, single = self._batch(obs)
        return self._to_env(self._sample(self.actor_params, self.obs_stats, batch, key),
                            single)

    def episode(self) -> EpisodeActing:
        """A fresh `EpisodeActing`: the deterministic policy acting through one episode
        on the env's own observations, keeping the frame stacks."""
        return EpisodeActing(self)

    def __repr__(self) -> str:
        return f"Policy({self.config.env_id!r}, step={self.step})"


class EpisodeActing:
    """The deterministic policy through an episode (or a batch of episodes started
    together), on the observations the env gives (single frames):

        act = policy.episode()
        obs, _ = env.reset()
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
        act.reset()  # before the next episode's first observation

    The first call after creating it or after `reset()` starts each image's stack with
    its first frame repeated, later calls drop the oldest frame and append the newest,
    as the runners and the replay buffer do (jaxsac.frames). Without a frame stack it
    is `policy(obs)`.
    """

    def __init__(self, policy: Policy):
        self.policy = policy
        self._frames = FrameStack(policy.actor_spec, policy.config.frame_stack)
        self._stack = None

    def reset(self) -> None:
        """The next call starts a new episode."""
        self._stack = None

    def __call__(self, obs: Any) -> np.ndarray:
        """The env action for the episode's newest observation `obs` (one, or a batch)."""
        batch, single = self.policy._batch(obs, self.policy.actor_spec)
        if self._stack is None:
            self._stack = self._frames.start(batch)
        else:
            self._stack = self._frames.push(self._stack, batch,
                                            np.zeros(len(jax.tree.leaves(batch)[0]), bool))
        action = self.policy._act(self.policy.actor_params, self.policy.obs_stats,
                                  self._stack)
        return self.policy._to_env(action, single)


def load_policy(directory: str | os.PathLike, step: int | None = None, *,
                best: bool = False, seed_index: int = 0, module_id: int = 0) -> Policy:
    """The deterministic policy of checkpoint `step` (the newest when None).

    Reads only the actor's parameters and the observation statistics (never the replay
    buffer).

    Args:
        directory: the run's checkpoint folder, one of its step folders
            (`<checkpoint folder>/<step>`), or its run folder (the log_dir of a run that
            recorded its checkpoint_dir, or a folder with one sub-folder of checkpoints).
        step: env steps of the checkpoint to load; None: the newest (an error when the
            folder holds the checkpoints of several runs).
        best: load the checkpoint of the best evaluation instead (kept by training with
            `keep_best=True`); `step` must then be None.
        seed_index: for a checkpoint of several seeds, the one to load.
        module_id: for a multi-agent run with independent modules, the module to load
            (agent `module_id`'s policy; the only module, 0, otherwise).

    Returns:
        Policy: obs [*obs_shape] or [B, *obs_shape] -> env actions (numpy).

    Raises:
        FileNotFoundError: no such checkpoint (or no best one). CorruptCheckpointError: it
        cannot be read back bit for bit. ValueError: a seed_index or module_id it does
        not hold, or a folder of several runs without a step.
    """
    owner = "checkpoint.load_policy"
    checks.check_bool(owner, "best", best)
    if best:
        if step is not None:
            checks.fail(owner, "step", step, "None with best=True (the best checkpoint is "
                        "one step)")
        directory = runs.best_directory(directory, owner)
    with checkpoint.open_step(directory, step, owner) as opened:
        config, meta = opened.config, opened.meta
        _check_choice(opened, seed_index, module_id)
        template = checkpoint.template(config, meta)
        items = checkpoint.state_items(template)[0]
        stats_prefix = "obs_norm." if meta["backend"] == "jax" else ""
        stats_template = None
        if template.runner is not None:
            stats_template = connectors.select_stats(
                template.runner.obs_norm if stats_prefix else template.runner,
                config.actor_obs_keys)
            stat_names = {stats_prefix + storage.leaf_name(path) for path, _ in
                          jax.tree_util.tree_flatten_with_path(stats_template)[0]}
        wanted = {"learner": {n: x for n, x in items["learner"].items()
                              if n.startswith("actor_params.")},
                  "runner": {n: x for n, x in items.get("runner", {}).items()
                             if stats_template is not None and n in stat_names}}
        opened.check_shapes(wanted, list(wanted), True, "does not fit its config")
        restored = opened.read(wanted, partial=True)
    pick = (lambda x: x[seed_index]) if meta["seed_axis"] else (lambda x: x)
    pick_module = (lambda x: pick(x)[module_id]) if config.num_modules > 1 else pick
    actor = _unflatten_subtree(template.learner.actor_params, restored["learner"],
                               "actor_params.", pick_module)
    if restored.get("runner"):
        stats = _unflatten_subtree(stats_template, restored["runner"], stats_prefix, pick)
    else:
        if config.normalize_obs:
            warnings.warn(f"{opened.where} has no observation statistics (saved without a "
                          "runner state) although normalize_obs=True: the policy sees "
                          "unnormalized observations", stacklevel=2)
        stats = connectors.init_obs_norm(ObsSpec.from_metadata(meta))
    return Policy(config, opened.step, actor, stats, meta)


def _image_batch(shape: tuple[int, ...], obs: Any) -> tuple[np.ndarray, bool]:
    """(images [B, *shape] uint8, whether `obs` was one image); a ValueError names
    another shape."""
    obs = np.asarray(obs)
    single = obs.shape == shape
    if not single and obs.shape[1:] != shape:
        raise ValueError(f"Policy: obs of shape {obs.shape}; expected {shape} or "
                         f"(B, {', '.join(map(str, shape))}) uint8 images")
    obs = obs.astype(np.uint8)
    return (obs[None] if single else obs), single


def _dict_batch(spec: ObsSpec, obs: Any) -> tuple[dict[str, np.ndarray], bool]:
    """(the entries of `spec` of a dict observation, each [B, *shape], whether it was
    one observation): ValueErrors name a missing entry or one of another shape."""
    if not isinstance(obs, Mapping) or any(k not in obs for k in spec.keys):
        got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
        raise ValueError(f"Policy: obs={got} is invalid: must be a dict with the entries "
                         f"{list(spec.keys)} (the ones the actor reads)")
    entries = {k: np.asarray(obs[k], d) for k, _, d in spec.entries()}
    first = entries[spec.keys[0]].shape
    single = first == spec.shapes[0]
    for k, shape, _ in spec.entries():
        got = entries[k].shape
        if got != (shape if single else (first[:1] + shape)):
            raise ValueError(f"Policy: obs[{k!r}] of shape {got}; expected {shape} or "
                             f"(B, {', '.join(map(str, shape))}), one observation or a batch "
                             "as every entry")
    if single:
        entries = {k: x[None] for k, x in entries.items()}
    return entries, single


def _check_choice(opened: checkpoint.OpenStep, seed_index: Any, module_id: Any) -> None:
    """ValueErrors for a `seed_index` or `module_id` the checkpoint does not hold."""
    seeds = opened.meta["num_seeds"] if opened.meta["seed_axis"] else 1
    if not checks.is_int(seed_index) or not 0 <= seed_index < seeds:
        checks.fail("load_policy", "seed_index", seed_index,
                    f"in [0, {seeds}): {opened.where} holds {seeds} seed(s)")
    modules = opened.config.num_modules
    if not checks.is_int(module_id) or not 0 <= module_id < modules:
        checks.fail("load_policy", "module_id", module_id,
                    f"in [0, {modules}): {opened.where} holds {modules} module(s)")


def _unflatten_subtree(template: Any, arrays: dict[str, Any], prefix: str,
                       pick: Callable[[Any], Any]) -> Any:
    """The subtree `template` from the stored arrays named `prefix` + its leaf names,
    each through `pick` (one seed's or module's slice)."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    return jax.tree_util.tree_unflatten(
        treedef, [pick(arrays[prefix + storage.leaf_name(path)]) for path, _ in paths])
