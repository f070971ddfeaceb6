"""SACConfig: every setting of a jaxsac run in one frozen, validated, hashable dataclass.

Each field is declared with `setting`: its default, the part of a run that reads it
(PARTS) and its roles (ROLES: structural, sweepable, ...). The lists other modules need
are derived from these declarations with `fields_with(role)` and `fields_of(part)`.

The defaults are those of docs/semantics.md ("Defaults"). A config is static: it is hashed as a
`jax.jit` static argument and never traced. Values that must vary under `vmap` (learning
rates, tau, initial alpha, gamma in a sweep) are passed to `make_train` separately.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Literal, NamedTuple

from jaxsac import checks
from jaxsac.field_roles import (  # noqa: F401 - the roles and parts are used from here
    CHECKPOINTS,
    ENV,
    ENV_STEP_COUNT,
    EVALUATION,
    EXPLORATION,
    LEARNER,
    LEARNER_ARRAY,
    LOGGING,
    NETWORKS,
    NOT_COMPILED,
    PARTS,
    POSITIVE,
    REPLAY,
    ROLES,
    RUN,
    RUNNERS,
    SCHEDULE,
    STRUCTURAL,
    SWEEPABLE,
    Bool,
    Choice,
    FrozenKwargs,
    Int,
    JsonKwargs,
    Kwargs,
    Name,
    Names,
    Real,
    check_value,
    jsonable,
    normalized,
    setting,
)
from jaxsac.learner_fields import check_learner_fields
from jaxsac.run_fields import check_run_fields
from jaxsac.runner_fields import check_runner_fields

BACKENDS = ("auto", "jax", "gymnasium")
ACTIVATIONS = ("relu", "tanh", "elu", "gelu", "silu", "leaky_relu")
CRITIC_LOSSES = ("mse", "huber")
CATEGORICAL_TARGETS = ("c51", "hl_gauss")
NETWORK_BODIES = ("mlp", "bro", "simbav2")
VECTORIZATIONS = ("sync", "async")
POLICY_MAPPINGS = ("independent", "shared")
PRNG_IMPLS = ("threefry2x32", "philox4x32")

@dataclasses.dataclass(frozen=True)
class SACConfig:
    """Configuration of one SAC run (environment, hyperparameters, logging, checkpoints).

    `n_step` is an int (fixed n) or a pair `(n_min, n_max)`: each sample draws n
    uniformly from {n_min, ..., n_max}. `target_entropy` is a float or "auto":
    −`target_entropy_ratio` · |A| for Box actions, `target_entropy_scale` · log|A| for
    Discrete ones.
    """

    env_id: str = setting("Pendulum-v1", ENV, STRUCTURAL, check=Name("environment id"))
    """Gymnasium id of the environment (a JAX implementation is used when there is one),
    or an id registered with jaxsac.envs.register_gym_env (a factory) or register_jax_env."""
    env_kwargs: JsonKwargs = setting(FrozenKwargs(), ENV, check=Kwargs())
    """The env's own arguments: gymnasium.make's, a JAX env's or a registered factory's
    (e.g. {"g": 9.81}), and max_episode_steps to override its time limit."""
    backend: Literal["auto", "jax", "gymnasium"] = setting("auto", ENV, check=Choice(BACKENDS))
    """"jax": the env runs on the device inside the jitted program; "gymnasium": a host
    loop; "auto": jax when the env has a JAX implementation."""
    num_envs: int = setting(1, ENV, STRUCTURAL, check=Int(1))
    """Parallel envs, each stepped once per iteration."""
    num_agents: int = setting(1, ENV, STRUCTURAL, check=Int(1))
    """Agents per env (multi-agent envs such as MultiAgentPendulum-v1). Step counts
    (total_env_steps, learning_starts, log_every, buffer_capacity, ...) count each
    agent's own env steps."""
    policy_mapping: Literal["independent", "shared"] = setting(
        "independent", ENV, STRUCTURAL, check=Choice(POLICY_MAPPINGS))
    """Multi-agent envs: "independent" gives every agent its own module (parameters, α,
    optimizers, replay buffer, vmapped over a module axis); "shared" trains one module
    on all agents' steps (agents are extra env columns of one buffer)."""
    data_shards: int | None = setting(None, RUN)
    """Logical data shards S: each owns num_envs/S envs and a replay buffer of
    buffer_capacity/S steps, and gives batch_size/S samples to every gradient step
    (jaxsac.sharding). None: the size of the device mesh's "data" axis (1 on one device)."""
    vectorization: Literal["sync", "async"] = setting("sync", RUNNERS, NOT_COMPILED,
                                                      check=Choice(VECTORIZATIONS))
    """Gymnasium vector env: one process ("sync") or one process per env ("async")."""
    seed: int = setting(0, RUN, NOT_COMPILED, check=Int(0, 2**32 - 1))
    """Root seed: the run's key is jax.random.key(seed)."""
    prng_impl: Literal["threefry2x32", "philox4x32"] = setting(
        "threefry2x32", RUN, STRUCTURAL, check=Choice(PRNG_IMPLS))
    """The run's random-number generator (a `jax.random` implementation); the key a run
    starts from, of any implementation, is re-keyed for it. philox4x32 takes fewer
    operations per draw on the CPU (docs/performance.md) but XLA cannot partition it
    over several devices: it is for one-device runs."""
    total_env_steps: int = setting(100_000, SCHEDULE, ENV_STEP_COUNT, NOT_COMPILED, check=Int(1))
    """Env steps of the whole run (a multiple of log_every)."""
    learning_starts: int = setting(1_500, SCHEDULE, ENV_STEP_COUNT, check=Int(0))
    """Env steps of uniform random actions before the policy acts and learning starts."""
    max_env_restarts: int = setting(3, RUNNERS, NOT_COMPILED, check=Int(0))
    """Consecutive failures of one gymnasium env that are rebuilt before the run stops."""
    num_env_runners: int = setting(0, RUNNERS, NOT_COMPILED, check=Int(0))
    """Gymnasium envs: Ray actors that step them, each with num_envs_per_env_runner envs
    and the acting policy on its own CPU (needs `pip install -e '.[ray]'`,
    docs/scaling.md); 0 steps them in this process."""
    num_envs_per_env_runner: int | None = setting(None, RUNNERS, NOT_COMPILED)
    """Envs of each remote runner; None: num_envs / num_env_runners (num_envs is always
    the total)."""
    ray_address: str | None = setting(None, RUNNERS, NOT_COMPILED)
    """The Ray cluster remote runners join ("auto", "ray://head:10001", ...); None: the
    RAY_ADDRESS variable's, else a local Ray started for the run. Ignored when Ray is
    already initialized in this process."""
    sample_timeout_s: float = setting(60.0, RUNNERS, NOT_COMPILED,
                                      check=Real(0.0, math.inf, open_low=True))
    """Seconds the learner waits for each remote runner's block; a runner that takes
    longer is replaced, as one whose process died. Remote runners only: without them
    another value is refused (a step of this process's envs cannot be timed out)."""
    max_env_runner_restarts: int = setting(10, RUNNERS, NOT_COMPILED, check=Int(0))
    """Remote runners: replacements of one runner (its actor died or timed out) allowed
    in one `train` call; one more failure stops the run with an error, after a
    checkpoint."""
    obs_keys: tuple[str, ...] | None = setting(None, ENV, check=Names("observation keys", True))
    """The entries of a MuJoCo Playground task's dict observation the run keeps (stores,
    normalizes, reads), in any order (None: all; e.g. ("state",)). The observation stays
    a dict; the "flat" encoder reads its entries in sorted key order."""
    normalize_obs: bool = setting(False, ENV, STRUCTURAL, check=Bool())
    """Normalize observations with running mean/std statistics (saved with checkpoints)."""
    frame_stack: int = setting(1, ENV, STRUCTURAL, check=Int(1))
    """Frames the policy sees: each image entry [H, W, C] uint8 as its episode's last k
    frames [H, W, C·k], oldest first (vectors not stacked); stored once, stacked at
    sample time (docs/semantics.md, "Frame stacks"). > 1 needs an image entry."""
    scale_rewards: bool = setting(False, ENV, STRUCTURAL, check=Bool())
    """SimbaV2's reward scaling: the learner sees rewards divided by the running scale of
    the discounted return (jaxsac.return_scale; statistics saved with checkpoints)."""
    reward_scale_g_max: float = setting(5.0, ENV, check=Real(0.0, math.inf, open_low=True))
    """scale_rewards: the scale is at least max|G| / reward_scale_g_max, which keeps the
    scaled returns within about ±reward_scale_g_max."""
    domain_randomization: bool = setting(False, ENV, STRUCTURAL, check=Bool())
    """Each env steps its own physics model, drawn from the seed by the task's Playground
    randomizer (friction, masses, gains, ...) as Playground's training does, held in the
    env states (so in checkpoints). Playground tasks with a randomizer only (T1/G1/Go1)."""

    gamma: float = setting(0.99, LEARNER, SWEEPABLE, check=Real(0.0, 1.0))
    """Discount γ."""
    batch_size: int = setting(256, REPLAY, check=Int(1))
    """Transitions per gradient step."""
    buffer_capacity: int = setting(1_000_000, REPLAY, STRUCTURAL, ENV_STEP_COUNT)
    """Env steps the replay buffer holds (a multiple of num_envs), oldest overwritten first."""
    actor_lr: float = setting(3e-4, LEARNER, SWEEPABLE, LEARNER_ARRAY, check=POSITIVE)
    """Adam learning rate of the actor."""
    critic_lr: float = setting(3e-4, LEARNER, SWEEPABLE, LEARNER_ARRAY, check=POSITIVE)
    """Adam learning rate of the critics."""
    alpha_lr: float = setting(3e-4, LEARNER, SWEEPABLE, LEARNER_ARRAY, check=POSITIVE)
    """Adam learning rate of log α."""
    tau: float = setting(
        0.005, LEARNER, SWEEPABLE, LEARNER_ARRAY, check=Real(0.0, 1.0, open_low=True))
    """Polyak coefficient of the target critics: θ̄ ← τθ + (1 − τ)θ̄."""
    initial_alpha: float = setting(1.0, LEARNER, SWEEPABLE, LEARNER_ARRAY, check=POSITIVE)
    """Entropy temperature α at the start."""
    learn_alpha: bool = setting(True, LEARNER, check=Bool())
    """Learn α toward the target entropy; False keeps α = initial_alpha."""
    target_entropy: float | Literal["auto"] = setting("auto", LEARNER)
    """Target entropy H̄; "auto" is −target_entropy_ratio · |A| (Box actions, −|A| by
    default) or target_entropy_scale · log|A| (Discrete actions, |A| of them)."""
    target_entropy_scale: float | None = setting(None, LEARNER)
    """Discrete actions only: "auto"'s target entropy as a fraction of the largest,
    log|A|, in (0, 1); None: 0.5 (docs/semantics.md, "Discrete actions")."""
    target_entropy_ratio: float | None = setting(None, LEARNER)
    """Box actions only: "auto"'s target entropy is −ratio · |A| (FastSAC's setting);
    None: 1, above −log 2 (the largest entropy of a squashed policy is |A| log 2)."""
    log_std_bounds: tuple[float, float] | None = setting(None, NETWORKS)
    """Box actions only: (min, max) the policy's log standard deviations are clipped
    to; None: (-5, 2)."""
    action_noise_exponent: float = setting(0.0, EXPLORATION, check=Real(0.0, math.inf))
    """Box actions: β of the exploration noise's 1/f^β power spectrum: 0 white (SAC's
    independent draws), 1 pink, 2 red; correlated noise explores sparse-reward tasks
    (jaxsac.noise, docs/semantics.md "Exploration noise")."""
    action_noise_horizon: int | None = setting(None, EXPLORATION)
    """Iterations each colored noise sequence covers; None: the env's time limit."""
    n_step: int | tuple[int, int] = setting(1, REPLAY)
    """n of n-step returns, or (n_min, n_max): each sample draws n from that range."""
    num_q: int = setting(2, NETWORKS, STRUCTURAL, check=Int(1))
    """Critics in the ensemble; targets use their minimum."""
    utd_ratio: float = setting(1.0, SCHEDULE, check=POSITIVE)
    """Gradient steps per env step (rounding: semantics.md "Warm-up and gradient-step schedule")."""
    target_network_update_freq: int = setting(1, LEARNER, check=Int(1))
    """Gradient steps between Polyak target updates."""
    policy_update_every: int = setting(1, LEARNER, check=Int(1))
    """Gradient steps between updates of the actor and α (FastSAC's, sbx's policy_delay);
    the critics update at every one."""
    hidden_sizes: tuple[int, ...] = setting((256, 256), NETWORKS, STRUCTURAL)
    """Hidden layer sizes of the actor and each critic (bro, simbav2: equal, one block each)."""
    network: Literal["mlp", "bro", "simbav2"] = setting(
        "mlp", NETWORKS, STRUCTURAL, check=Choice(NETWORK_BODIES))
    """The actor's and critics' body: "mlp", "bro" or "simbav2" (docs/semantics.md)."""
    activation: Literal["relu", "tanh", "elu", "gelu", "silu", "leaky_relu"] = setting(
        "relu", NETWORKS, STRUCTURAL, check=Choice(ACTIVATIONS))
    """Hidden-layer activation."""
    critic_layer_norm: bool = setting(False, NETWORKS, check=Bool())
    """network="mlp": LayerNorm after each hidden activation of the critics (brax's)."""
    encoder: str = setting("auto", NETWORKS, STRUCTURAL, check=Name("registered name"))
    """The actor's and critics' encoder, by name: "flat" (the entries flattened), "conv"
    (images, (H, W, C) uint8, through conv layers, the rest flat), "auto" ("conv" where a
    network's entries hold an image, else "flat") or a register_encoder one."""
    conv_channels: tuple[int, ...] = setting((32, 32, 32, 32), NETWORKS, STRUCTURAL)
    """"conv": the output channels of each convolution (DrQ's 4 x 32)."""
    conv_strides: tuple[int, ...] = setting((2, 1, 1, 1), NETWORKS, STRUCTURAL)
    """"conv": each convolution's stride, one per conv_channels entry."""
    conv_kernel_sizes: tuple[int, ...] | None = setting(None, NETWORKS, STRUCTURAL)
    """"conv": each convolution's k (k x k), one per conv_channels entry; None: 3 each
    (DrQ's). The Nature DQN's: channels (32, 64, 64), kernels (8, 4, 3), strides (4, 2, 1)."""
    encoder_features: int = setting(50, NETWORKS, STRUCTURAL, check=Int(1))
    """"conv": features of each image (a Dense, LayerNorm and tanh after the convolutions)."""
    encoder_sharing: Literal["separate", "critic"] = setting(
        "separate", NETWORKS, STRUCTURAL, check=Choice(("separate", "critic")))
    """"separate": the actor and critics train encoders of their own; "critic": the actor
    reads the critics' encoder's features, gradient stopped (DrQ, SAC-AE)."""
    image_pad: int | None = setting(None, LEARNER)
    """DrQ's random shift of the images in s and s′ at each update: pad by this many edge
    pixels, crop back at a random offset per sample; 0: off; None: 4 with an image, else 0."""
    augmentation_samples: int = setting(1, LEARNER, check=Int(1))
    """DrQ's K = M: shifted views of each sample, the target averaged over those of s′."""
    actor_obs_keys: tuple[str, ...] | None = setting(
        None, NETWORKS, STRUCTURAL, check=Names("observation keys", True))
    """The entries of a dict observation the actor reads (None: all), e.g. ("state",):
    what the robot senses; a loaded policy needs only these."""
    critic_obs_keys: tuple[str, ...] | None = setting(
        None, NETWORKS, STRUCTURAL, check=Names("observation keys", True))
    """The entries the critics read (None: all), e.g. ("privileged_state",) for an
    asymmetric actor-critic; each entry has its own normalization."""
    critic: str = setting("ensemble", NETWORKS, STRUCTURAL, check=Name("registered name"))
    """The critic family, by name: "ensemble", "tqc", "categorical", "crossq"
    (docs/semantics.md) or one added with jaxsac.networks.register_critic."""
    critic_loss: Literal["mse", "huber"] = setting("mse", NETWORKS, check=Choice(CRITIC_LOSSES))
    """critic="ensemble": ½x² ("mse") or Huber with δ = 1 ("huber")."""
    num_quantiles: int = setting(25, NETWORKS, STRUCTURAL, check=Int(1))
    """critic="tqc": quantiles M each critic outputs."""
    quantiles_to_drop_per_net: int = setting(2, NETWORKS, check=Int(0))
    """critic="tqc": the target drops the num_q · this largest pooled quantiles."""
    num_atoms: int = setting(101, NETWORKS, STRUCTURAL, check=Int(2))
    """critic="categorical": atoms K of the support linspace(v_min, v_max, K)."""
    v_min: float | None = setting(None, NETWORKS, STRUCTURAL)
    """critic="categorical" (required): the support's lowest atom; returns below it clip."""
    v_max: float | None = setting(None, NETWORKS, STRUCTURAL)
    """critic="categorical" (required): the support's highest atom; returns above it clip."""
    categorical_target: Literal["c51", "hl_gauss"] = setting(
        "c51", NETWORKS, check=Choice(CATEGORICAL_TARGETS))
    """critic="categorical": the target projected onto the support ("c51") or HL-Gauss."""
    hl_gauss_sigma: float = setting(0.75, NETWORKS, check=POSITIVE)
    """categorical_target="hl_gauss": the normal's σ in atom spacings."""
    batch_norm_momentum: float = setting(0.99, NETWORKS, check=Real(0.0, 1.0))
    """critic="crossq": momentum of the batch renormalization's running statistics."""
    batch_renorm_warmup: int = setting(100_000, NETWORKS, check=Int(0))
    """critic="crossq": gradient steps of batch normalization before renormalization."""
    actor_batch_renorm: bool = setting(False, NETWORKS, STRUCTURAL, check=Bool())
    """critic="crossq" only: the actor too is a batch-renormalized MLP, BRN(x) ->
    [Dense -> activation -> BRN] per hidden size -> Dense (CrossQ's and sbx's actor), with
    batch_norm_momentum and batch_renorm_warmup; its statistics move in the actor's loss
    (train mode) and are read everywhere else (eval mode, acting included)."""
    grad_clip: float | None = setting(None, LEARNER)
    """Global-norm gradient clipping, applied to each optimizer separately; None: off."""
    adam_b1: float = setting(0.9, LEARNER, check=Real(0.0, 1.0))
    """β1 of every Adam optimizer (actor, critics, α), in [0, 1): the decay of the
    gradient's moving average (CrossQ uses 0.5)."""

    prioritized: bool = setting(False, REPLAY, STRUCTURAL, check=Bool())
    """Prioritized replay (sum tree) instead of uniform sampling."""
    priority_alpha: float = setting(0.6, REPLAY, check=Real(0.0, math.inf))
    """Priority exponent α: P(t) ∝ p_t^α."""
    priority_beta: float = setting(0.4, REPLAY, check=Real(0.0, 1.0))
    """Importance-sampling exponent β."""
    priority_beta_final: float | None = setting(None, REPLAY)
    """If set, β moves linearly to this value over priority_beta_steps gradient steps."""
    priority_beta_steps: int = setting(0, REPLAY, check=Int(0))
    """Length of the β schedule, in gradient steps."""
    priority_eps: float = setting(1e-6, REPLAY, check=POSITIVE)
    """ε in the priority p = |td_error| + ε."""

    log_every: int = setting(1_000, SCHEDULE, ENV_STEP_COUNT, check=Int(1))
    """Env steps per log period; each ends with a metrics row and an evaluation."""
    eval_env_id: str | None = setting(None, EVALUATION, check=Name("environment id", True))
    """The env evaluations run on (None: env_id), with the spaces of env_id's."""
    eval_env_kwargs: JsonKwargs | None = setting(None, EVALUATION, check=Kwargs(optional=True))
    """The evaluation env's own arguments (None: env_kwargs)."""
    eval_episodes: int = setting(10, EVALUATION, check=Int(1))
    """Episodes of each evaluation."""
    eval_policy: Literal["mode", "sample"] = setting(
        "mode", EVALUATION, check=Choice(("mode", "sample")))
    """The actions evaluations take: "mode", the policy's deterministic action (tanh(μ),
    the argmax for Discrete actions), or "sample", a draw from π(·|s) at every step (as
    discrete SAC's near-uniform policies are often judged)."""
    eval_max_episode_steps: int = setting(10_000, EVALUATION, NOT_COMPILED, check=Int(1))
    """Gymnasium envs without a time limit of their own: steps after which an evaluation
    episode is cut (truncated), so an env that never ends one cannot stall the run."""
    eval_timeout_s: float = setting(600.0, EVALUATION, NOT_COMPILED, check=POSITIVE)
    """Gymnasium envs: wall-clock seconds one evaluation may take; the episodes not
    finished by then are dropped (eval_failures), with a warning."""
    host_block_steps: int = setting(8, RUNNERS, check=Int(1))
    """Gymnasium loop: iterations whose buffer adds and gradient steps run in one jitted
    call (the policy and observation statistics acting within them are those from the
    block's start)."""
    log_dir: str | None = setting(None, LOGGING, NOT_COMPILED, check=Name("path", True))
    """Folder for metrics.csv, TensorBoard events and curve.png; None: no files."""
    loggers: tuple[str, ...] = setting(("csv", "tensorboard"), LOGGING, NOT_COMPILED,
                                       check=Names("logger names"))
    """Where the metrics go with a log_dir: "csv" (metrics.csv, and curve.png from it),
    "tensorboard", "wandb", "mlflow" (their extras), or one of logger.register_logger."""
    checkpoint_dir: str | None = setting(None, CHECKPOINTS, NOT_COMPILED,
                                         check=Name("path", True))
    """Folder for Orbax checkpoints; None: no checkpoints."""
    checkpoint_every: int = setting(0, CHECKPOINTS, ENV_STEP_COUNT, NOT_COMPILED, check=Int(0))
    """Env steps between checkpoints (0: only at the end of the run)."""
    checkpoint_buffer: bool = setting(True, CHECKPOINTS, NOT_COMPILED, check=Bool())
    """Include the replay buffer in checkpoints."""
    max_to_keep: int = setting(3, CHECKPOINTS, NOT_COMPILED, check=Int(1))
    """Checkpoints kept; older ones are deleted."""
    resume: bool = setting(False, CHECKPOINTS, NOT_COMPILED, check=Bool())
    """Continue the run whose checkpoints checkpoint_dir holds, from its newest one (an
    error when there is none); False starts a new run (jaxsac.runs)."""
    keep_best: bool = setting(False, CHECKPOINTS, NOT_COMPILED, check=Bool())
    """Also keep the checkpoint of the best evaluation so far (mean over seeds), without
    its buffer, in checkpoint_dir/best; `load_policy(..., best=True)` loads it."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, normalized(getattr(self, field.name)))
        _validate(self)

    @property
    def num_data_shards(self) -> int:
        """S: `data_shards`, or 1 while it is None (not yet set from a mesh)."""
        return 1 if self.data_shards is None else self.data_shards

    @property
    def eval_env(self) -> tuple[str, FrozenKwargs]:
        """(env id, its kwargs) of the evaluation env."""
        kwargs = self.env_kwargs if self.eval_env_kwargs is None else self.eval_env_kwargs
        return self.eval_env_id or self.env_id, kwargs

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
        return {f.name: jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

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


def fields_with(role: str) -> tuple[str, ...]:
    """The SACConfig fields that have `role` (one of ROLES), in declaration order."""
    if role not in ROLES:
        checks.fail("fields_with", "role", role, f"one of {list(ROLES)}")
    return tuple(f.name for f in dataclasses.fields(SACConfig) if role in f.metadata["roles"])


def fields_of(part: str) -> tuple[str, ...]:
    """The SACConfig fields read by `part` (one of PARTS), in declaration order."""
    if part not in PARTS:
        checks.fail("fields_of", "part", part, f"one of {list(PARTS)}")
    return tuple(f.name for f in dataclasses.fields(SACConfig) if f.metadata["part"] == part)


def settings_type(name: str, parts: tuple[str, ...], extra: tuple[str, ...] = ()) -> type:
    """A NamedTuple type of the SACConfig fields read by `parts` (and the `extra` fields
    of other parts), in declaration order, with `of(config)` taking them from a config:
    the settings one piece of a run takes instead of the whole config. Hashable, so it
    can be a static argument or a cache key (as a tuple, it equals any tuple of the same
    values: key caches by the settings of one type)."""
    if not set(parts) <= set(PARTS):
        checks.fail("settings_type", "parts", parts, f"parts from {list(PARTS)}")
    fields = [f for f in dataclasses.fields(SACConfig)
              if f.metadata["part"] in parts or f.name in extra]
    unknown = sorted(set(extra) - {f.name for f in dataclasses.fields(SACConfig)})
    if unknown:
        checks.fail("settings_type", "extra", extra, f"SACConfig fields (unknown: {unknown})")
    base = NamedTuple(f"{name}Fields", [(f.name, Any) for f in fields])

    def of(cls: type, config: SACConfig) -> Any:
        return cls(*(getattr(config, field) for field in cls._fields))

    doc = (f"The SACConfig fields of the parts {list(parts)}"
           + (f" and {list(extra)}" if extra else "") + ": " + ", ".join(base._fields) + ".")
    return type(name, (base,), {"__slots__": (), "__doc__": doc, "of": classmethod(of),
                                "__module__": __name__})


def _validate(c: SACConfig) -> None:
    """Each field's own check, then the checks across fields."""
    for field in dataclasses.fields(c):
        if field.metadata["check"] is not None:
            check_value("SACConfig", field.name, getattr(c, field.name), field.metadata["check"])
    check_runner_fields(c)
    check_run_fields(c)
    check_learner_fields(c)
