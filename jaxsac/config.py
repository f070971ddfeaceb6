"""SACConfig: every setting of a jaxsac run in one frozen, validated, hashable dataclass.

The defaults are those of docs/semantics.md ("Defaults"). A config is static: it is hashed as a
`jax.jit` static argument and never traced. Values that must vary under `vmap` (learning
rates, tau, initial alpha, gamma in a sweep) are passed to `make_train` separately.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Literal

import numpy as np

from jaxsac import checks

BACKENDS = ("auto", "jax", "gymnasium")
ACTIVATIONS = ("relu", "tanh", "elu", "gelu", "silu", "leaky_relu")
CRITIC_LOSSES = ("mse", "huber")
VECTORIZATIONS = ("sync", "async")
POLICY_MAPPINGS = ("independent", "shared")
PRNG_IMPLS = ("threefry2x32", "philox4x32")


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """Configuration of one SAC run (environment, hyperparameters, logging, checkpoints).

    `n_step` is an int (fixed n) or a pair `(n_min, n_max)`: each sample draws n
    uniformly from {n_min, ..., n_max}. `target_entropy` is a float or "auto": −|A| for
    Box actions, `target_entropy_scale` · log|A| for Discrete ones.
    `utd_ratio` is gradient steps per env step: each iteration (every env steps once)
    takes `round(utd_ratio * num_envs)` gradient steps (Python's round, halves to even)
    while that is at least one; when it rounds to zero (utd_ratio * num_envs <= 0.5), one
    gradient step every `round(1 / (utd_ratio * num_envs))` iterations.
    """

    env_id: str = "Pendulum-v1"
    """Gymnasium id of the environment (a JAX implementation is used when there is one)."""
    backend: Literal["auto", "jax", "gymnasium"] = "auto"
    """"jax": the env runs on the device inside the jitted program; "gymnasium": a host
    loop; "auto": jax when the env has a JAX implementation."""
    num_envs: int = 1
    """Parallel envs, each stepped once per iteration."""
    num_agents: int = 1
    """Agents per env (multi-agent envs such as MultiAgentPendulum-v1). Step counts
    (total_env_steps, learning_starts, log_every, buffer_capacity, ...) count each
    agent's own env steps."""
    policy_mapping: Literal["independent", "shared"] = "independent"
    """Multi-agent envs: "independent" gives every agent its own module (parameters, α,
    optimizers, replay buffer, vmapped over a module axis); "shared" trains one module
    on all agents' steps (agents are extra env columns of one buffer)."""
    data_shards: int | None = None
    """Logical data shards S: each owns num_envs/S envs and a replay buffer of
    buffer_capacity/S steps, and gives batch_size/S samples to every gradient step
    (jaxsac.sharding). None: the size of the device mesh's "data" axis (1 on one device)."""
    vectorization: Literal["sync", "async"] = "sync"
    """Gymnasium vector env: one process ("sync") or one process per env ("async")."""
    seed: int = 0
    """Root seed: the run's key is jax.random.key(seed)."""
    prng_impl: Literal["threefry2x32", "philox4x32"] = "threefry2x32"
    """The run's random-number generator (a `jax.random` implementation); the key a run
    starts from, of any implementation, is re-keyed for it. philox4x32 takes fewer
    operations per draw on the CPU (1-3% of an iteration, docs/performance.md) but XLA
    cannot partition it over several devices: it is for one-device runs."""
    total_env_steps: int = 100_000
    """Env steps of the whole run (a multiple of log_every)."""
    learning_starts: int = 1_500
    """Env steps of uniform random actions before the policy acts and learning starts."""
    max_env_restarts: int = 3
    """Consecutive failures of one gymnasium env that are rebuilt before the run stops."""
    num_env_runners: int = 0
    """Gymnasium envs: Ray actors that step them, each with num_envs_per_env_runner envs
    and the acting policy on its own CPU (needs `pip install -e '.[ray]'`,
    docs/scaling.md); 0 steps them in this process."""
    num_envs_per_env_runner: int | None = None
    """Envs of each remote runner; None: num_envs / num_env_runners (num_envs is always
    the total)."""
    ray_address: str | None = None
    """The Ray cluster remote runners join ("auto", "ray://head:10001", ...); None: the
    RAY_ADDRESS variable's, else a local Ray started for the run. Ignored when Ray is
    already initialized in this process."""
    sample_timeout_s: float = 60.0
    """Seconds the learner waits for each remote runner's block; a runner that takes
    longer is replaced, as one whose process died."""
    max_env_runner_restarts: int = 10
    """Remote runners: replacements of one runner (its actor died or timed out) allowed
    in one `train` call; one more failure stops the run with an error, after a
    checkpoint."""
    obs_keys: tuple[str, ...] | None = None
    """A dict observation's keys that make up the flat observation, in this order (None:
    all keys, sorted); MuJoCo Playground tasks only (e.g. ("state",))."""
    normalize_obs: bool = False
    """Normalize observations with running mean/std statistics (saved with checkpoints)."""

    gamma: float = 0.99
    """Discount γ."""
    tau: float = 0.005
    """Polyak coefficient of the target critics: θ̄ ← τθ + (1 − τ)θ̄."""
    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_capacity: int = 1_000_000
    """Env steps the replay buffer holds (a multiple of num_envs), oldest overwritten first."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of log α."""
    initial_alpha: float = 1.0
    """Entropy temperature α at the start."""
    learn_alpha: bool = True
    """Learn α toward the target entropy; False keeps α = initial_alpha."""
    target_entropy: float | Literal["auto"] = "auto"
    """Target entropy H̄; "auto" is −|A| (Box actions) or target_entropy_scale · log|A|
    (Discrete actions, |A| of them)."""
    target_entropy_scale: float | None = None
    """Discrete actions only: "auto"'s target entropy as a fraction of the largest,
    log|A|, in (0, 1); None: 0.5 (docs/semantics.md, "Discrete actions")."""
    log_std_bounds: tuple[float, float] | None = None
    """Box actions only: (min, max) the policy's log standard deviations are clipped
    to; None: (-5, 2)."""
    action_noise_exponent: float = 0.0
    """Box actions: β of the exploration noise's 1/f^β power spectrum: 0 white (SAC's
    independent draws), 1 pink, 2 red; correlated noise explores sparse-reward tasks
    (jaxsac.noise, docs/semantics.md "Exploration noise")."""
    action_noise_horizon: int | None = None
    """Iterations each colored noise sequence covers; None: the env's time limit."""
    n_step: int | tuple[int, int] = 1
    """n of n-step returns, or (n_min, n_max): each sample draws n from that range."""
    num_q: int = 2
    """Critics in the ensemble; targets use their minimum."""
    utd_ratio: float = 1.0
    """Gradient steps per env step (see the class docstring for how it is rounded)."""
    target_network_update_freq: int = 1
    """Gradient steps between Polyak target updates."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the actor and of each critic."""
    activation: Literal["relu", "tanh", "elu", "gelu", "silu", "leaky_relu"] = "relu"
    """Hidden-layer activation."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden activation of the critics (as brax's SAC for
    Playground's tasks; steadier Q-values with large batches and high learning rates)."""
    critic_loss: Literal["mse", "huber"] = "mse"
    """Critic loss: ½x² ("mse") or Huber with δ = 1 ("huber")."""
    grad_clip: float | None = None
    """Global-norm gradient clipping, applied to each optimizer separately; None: off."""

    prioritized: bool = False
    """Prioritized replay (sum tree) instead of uniform sampling."""
    priority_alpha: float = 0.6
    """Priority exponent α: P(t) ∝ p_t^α."""
    priority_beta: float = 0.4
    """Importance-sampling exponent β."""
    priority_beta_final: float | None = None
    """If set, β moves linearly to this value over priority_beta_steps gradient steps."""
    priority_beta_steps: int = 0
    """Length of the β schedule, in gradient steps."""
    priority_eps: float = 1e-6
    """ε in the priority p = |td_error| + ε."""

    log_every: int = 1_000
    """Env steps per log period; each ends with a metrics row and an evaluation."""
    eval_episodes: int = 10
    """Episodes of each deterministic evaluation."""
    host_block_steps: int = 8
    """Gymnasium loop: iterations whose buffer adds and gradient steps run in one jitted
    call (the policy and observation statistics acting within them are those from the
    block's start)."""
    log_dir: str | None = None
    """Folder for metrics.csv, TensorBoard events and curve.png; None: no files."""
    checkpoint_dir: str | None = None
    """Folder for Orbax checkpoints; None: no checkpoints."""
    checkpoint_every: int = 0
    """Env steps between checkpoints (0: only at the end of the run)."""
    checkpoint_buffer: bool = True
    """Include the replay buffer in checkpoints."""
    max_to_keep: int = 3
    """Checkpoints kept; older ones are deleted."""
    resume: bool = False
    """Continue from the latest checkpoint in checkpoint_dir."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list):  # from JSON or a CLI
                value = tuple(value)
            if isinstance(value, tuple):
                value = tuple(_python_scalar(v) for v in value)
            object.__setattr__(self, field.name, _python_scalar(value))
        _validate(self)

    @property
    def num_data_shards(self) -> int:
        """S: `data_shards`, or 1 while it is None (not yet set from a mesh)."""
        return 1 if self.data_shards is None else self.data_shards

    @property
    def envs_per_env_runner(self) -> int:
        """Envs each env runner steps: num_envs without remote runners."""
        if self.num_env_runners == 0:
            return self.num_envs
        return self.num_envs_per_env_runner or self.num_envs // self.num_env_runners

    @property
    def n_step_range(self) -> tuple[int, int]:
        """`(n_min, n_max)`, both included; `(n, n)` for a fixed n."""
        if isinstance(self.n_step, int):
            return (self.n_step, self.n_step)
        return tuple(self.n_step)  # type: ignore[return-value]

    @property
    def num_modules(self) -> int:
        """Modules (policies) trained: num_agents for "independent", else one."""
        return self.num_agents if self.policy_mapping == "independent" else 1

    def replace(self, **changes: Any) -> SACConfig:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of JSON-compatible values (tuples become lists)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SACConfig:
        """Inverse of `to_dict`; unknown keys raise `ValueError` naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"SACConfig: unknown field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SACConfig:
        return cls.from_dict(json.loads(text))


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _python_scalar(value: Any) -> Any:
    """numpy scalars as Python numbers (a config is hashed and written as JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def _validate(c: SACConfig) -> None:
    owner = "SACConfig"
    if not isinstance(c.env_id, str) or not c.env_id:
        checks.fail(owner, "env_id", c.env_id, "a non-empty gymnasium environment id")
    for name, choices in (("backend", BACKENDS), ("vectorization", VECTORIZATIONS),
                          ("activation", ACTIVATIONS), ("critic_loss", CRITIC_LOSSES),
                          ("policy_mapping", POLICY_MAPPINGS), ("prng_impl", PRNG_IMPLS)):
        checks.check_choice(owner, name, getattr(c, name), choices)
    for name in ("learn_alpha", "normalize_obs", "prioritized", "checkpoint_buffer", "resume",
                 "critic_layer_norm"):
        checks.check_bool(owner, name, getattr(c, name))
    minimums = {"num_envs": 1, "num_agents": 1, "batch_size": 1, "num_q": 1,
                "target_network_update_freq": 1, "total_env_steps": 1, "learning_starts": 0,
                "max_env_restarts": 0, "priority_beta_steps": 0,
                "checkpoint_every": 0, "log_every": 1, "eval_episodes": 1, "max_to_keep": 1,
                "host_block_steps": 1, "num_env_runners": 0, "max_env_runner_restarts": 0}
    for name, minimum in minimums.items():
        checks.check_int(owner, name, getattr(c, name), minimum)
    checks.check_int(owner, "seed", c.seed, 0, 2**32 - 1)
    if c.learning_starts >= c.total_env_steps:
        checks.fail(owner, "learning_starts", c.learning_starts,
                    f"below total_env_steps={c.total_env_steps} (else the run takes no "
                    "gradient step)")
    if c.checkpoint_dir is not None and (not isinstance(c.checkpoint_dir, str)
                                         or not c.checkpoint_dir):
        checks.fail(owner, "checkpoint_dir", c.checkpoint_dir, "a non-empty path or None")
    if c.checkpoint_dir is None:
        if c.resume:
            checks.fail(owner, "resume", c.resume, "False without a checkpoint_dir to "
                        "resume from")
        if c.checkpoint_every:
            checks.fail(owner, "checkpoint_every", c.checkpoint_every,
                        "0 without a checkpoint_dir to write to")
    if c.log_dir is not None and (not isinstance(c.log_dir, str) or not c.log_dir):
        checks.fail(owner, "log_dir", c.log_dir, "a non-empty path or None")
    if c.data_shards is not None:
        checks.check_int(owner, "data_shards", c.data_shards, 1)
        for name in ("num_envs", "batch_size"):
            if getattr(c, name) % c.data_shards:
                checks.fail(owner, name, getattr(c, name), f"a multiple of data_shards="
                            f"{c.data_shards} (each shard gets an equal part)")
    _validate_env_runners(c)
    checks.check_int(owner, "buffer_capacity", c.buffer_capacity, c.num_envs)
    if c.buffer_capacity % c.num_envs:
        checks.fail(owner, "buffer_capacity", c.buffer_capacity,
                    f"a multiple of num_envs={c.num_envs} (each env gets an equal ring)")
    checks.check_real(owner, "gamma", c.gamma, 0.0, 1.0)
    checks.check_real(owner, "tau", c.tau, 0.0, 1.0, open_low=True)
    for name in ("actor_lr", "critic_lr", "alpha_lr", "initial_alpha", "utd_ratio",
                 "priority_eps"):
        checks.check_real(owner, name, getattr(c, name), 0.0, math.inf, open_low=True)
    checks.check_real(owner, "priority_alpha", c.priority_alpha, 0.0, math.inf)
    checks.check_real(owner, "action_noise_exponent", c.action_noise_exponent, 0.0, math.inf)
    if c.action_noise_horizon is not None:
        checks.check_int(owner, "action_noise_horizon", c.action_noise_horizon, 2)
        if not c.action_noise_exponent:
            checks.fail(owner, "action_noise_horizon", c.action_noise_horizon,
                        "None with white exploration noise (action_noise_exponent=0)")
    checks.check_real(owner, "priority_beta", c.priority_beta, 0.0, 1.0)
    if c.priority_beta_final is not None:
        checks.check_real(owner, "priority_beta_final", c.priority_beta_final, 0.0, 1.0)
        if not c.prioritized:
            checks.fail(owner, "priority_beta_final", c.priority_beta_final,
                        "None without prioritized replay (prioritized=False)")
    if c.grad_clip is not None:
        checks.check_real(owner, "grad_clip", c.grad_clip, 0.0, math.inf, open_low=True)
    if not (c.target_entropy == "auto" or checks.is_real(c.target_entropy)):
        checks.fail(owner, "target_entropy", c.target_entropy, '"auto" or a finite number')
    if c.target_entropy_scale is not None:
        if c.target_entropy != "auto":
            checks.fail(owner, "target_entropy_scale", c.target_entropy_scale,
                        f"None with an explicit target_entropy={c.target_entropy!r} (it "
                        'scales only target_entropy="auto")')
        scale = c.target_entropy_scale
        if not checks.is_real(scale) or not 0.0 < scale < 1.0:
            checks.fail(owner, "target_entropy_scale", scale, "None or a number in (0, 1) "
                        "(a fraction of the largest entropy, log|A|)")
    if c.log_std_bounds is not None and not (
            isinstance(c.log_std_bounds, tuple) and len(c.log_std_bounds) == 2
            and all(checks.is_real(b) for b in c.log_std_bounds)
            and c.log_std_bounds[0] < c.log_std_bounds[1]):
        checks.fail(owner, "log_std_bounds", c.log_std_bounds,
                    "None or a pair (min, max) of finite numbers with min < max")
    checks.check_n_step(owner, c.n_step)
    if c.obs_keys is not None and not (
            isinstance(c.obs_keys, tuple) and c.obs_keys
            and all(isinstance(k, str) and k for k in c.obs_keys)):
        checks.fail(owner, "obs_keys", c.obs_keys,
                    "None or a non-empty tuple of observation keys (non-empty strings)")
    if (not isinstance(c.hidden_sizes, tuple) or not c.hidden_sizes
            or not all(checks.is_int(h) and h >= 1 for h in c.hidden_sizes)):
        checks.fail(owner, "hidden_sizes", c.hidden_sizes,
                    "a non-empty tuple of positive integers")


def _validate_env_runners(c: SACConfig) -> None:
    owner = "SACConfig"
    checks.check_real(owner, "sample_timeout_s", c.sample_timeout_s, 0.0, math.inf,
                      open_low=True)
    if c.ray_address is not None and (not isinstance(c.ray_address, str) or not c.ray_address):
        checks.fail(owner, "ray_address", c.ray_address, 'None, "auto" or a Ray address')
    per_runner = c.num_envs_per_env_runner
    if per_runner is None:
        if c.num_env_runners and c.num_envs % c.num_env_runners:
            checks.fail(owner, "num_envs", c.num_envs, f"a multiple of num_env_runners="
                        f"{c.num_env_runners} (each remote runner steps an equal share)")
        return
    checks.check_int(owner, "num_envs_per_env_runner", per_runner, 1)
    if c.num_env_runners == 0:
        checks.fail(owner, "num_envs_per_env_runner", per_runner,
                    "None without remote runners (num_env_runners=0)")
    if per_runner * c.num_env_runners != c.num_envs:
        checks.fail(owner, "num_envs_per_env_runner", per_runner,
                    f"num_envs / num_env_runners = {c.num_envs} / {c.num_env_runners} "
                    "(num_envs counts every runner's envs)")
