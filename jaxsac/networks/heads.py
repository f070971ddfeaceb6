"""Policy heads: the action distribution of each kind of action space, with the
expectations over π the SAC losses take, chosen from the action adapter's `kind` at
assembly (`policy_head`).

The contract (`PolicyHead`), with B the batch, |A| the action dimension (Box) or the
number of actions (Discrete), and out the critic family's output (jaxsac.networks.critics):

    head.actor, head.critic              the actor network and the CriticFamily
    init(key, obs) -> (actor_params, critic_params)  (obs: the ObsSpec of observations)
    sample(actor_params, obs [B, ...], key, noise=None) -> actions [B, *action shape]
        (obs: an observation tree, jaxsac.observations)
        (noise: a Box policy's ε [B, |A|] instead of white draws from key)
    mode(actor_params, obs) -> the deterministic actions [B, *action shape]
    critic_outputs(actor_params, critic_variables, target_variables, obs, action,
                   next_obs, alpha, key)
        -> (out_taken, next_out, entropy, probs, critic state): the critics' out at the
        taken actions [N, B, *T] and what the family's `td_target` takes at s': the
        critics' out at a' ~ π with α log π(a'|s') [B] and probs None (one
        reparameterised sample), or at every action with α log π(·|s') [B, |A|] and
        π(·|s') [B, |A|] (an exact expectation); both from `critics.taken_and_next`
        (the target critics at s' unless the family passes them jointly), which also
        gives the family's new state
    policy_objective(actor_params, critic_params, obs, alpha, key)
        -> (actor loss per sample [B], log π term [B]: its mean is minus the entropy);
        the built-in heads run the actor in train mode here (`train_mode`: a
        batch-renormalized actor normalizes with the batch's statistics), in eval
        mode everywhere else
    auto_target_entropy(scale) -> the target entropy of target_entropy="auto" (scale: the
        config's target_entropy_ratio for Box actions, target_entropy_scale for Discrete
        ones, None when unset)

Another head plugs in for a new kind of action adapter (jaxsac.connectors.ModuleActions):

    jaxsac.networks.register_policy_head("my_kind", lambda actions, settings, critic,
                                         encoder: MyHead(...), critics_value_every_action=False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxsac import checks
from jaxsac.config import SACConfig
from jaxsac.networks.bodies import BODIES
from jaxsac.networks.critics import CriticFamily, taken_and_next
from jaxsac.networks.crossq import RenormMLP
from jaxsac.networks.encoders import ENCODER_SHARING, ENCODERS, encode, make_encoder
from jaxsac.networks.families import CRITICS, make_critic
from jaxsac.networks.registry import Registry
from jaxsac.networks.settings import NetworkSettings
from jaxsac.observations import ObsSpec, obs_spec

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

DISCRETE_TARGET_ENTROPY_SCALE = 0.5
"""target_entropy="auto" for Discrete actions is this fraction of the largest entropy,
log|A| (docs/semantics.md, "Discrete actions": the common 0.98 lets α grow without
bound on two actions)."""


def actor_body(hidden_sizes: Sequence[int], out_dim: int, activation: str, network: str,
               batch_renorm: tuple[float, int] | None, train: bool) -> nn.Module:
    """The actor's body, x [..., in] -> [..., out_dim]: the one `network` names
    (jaxsac.networks.bodies), or CrossQ's batch-renormalized MLP when `batch_renorm` is
    (momentum, warm-up steps), in train mode when `train` (no other body reads it)."""
    if batch_renorm is None:
        return BODIES[network](hidden_sizes, out_dim, activation)
    return RenormMLP(hidden_sizes, out_dim, activation, *batch_renorm, train)


class Actor(nn.Module):
    """obs [B, ...] (an observation tree) -> (mean [B, |A|], log_std [B, |A|]), log_std
    clipped to [log_std_min, log_std_max] (default [-5, 2]). `encoder`: obs -> features
    first (None: the flat features); `network`: the body (jaxsac.networks.bodies) by
    name; `batch_renorm`: (momentum, warm-up) for CrossQ's batch-renormalized body, whose
    mode `train` picks (its statistics, the "batch_stats" collection, move in train
    mode, applied with mutable=["batch_stats"])."""

    act_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    log_std_min: float = LOG_STD_MIN
    log_std_max: float = LOG_STD_MAX
    encoder: nn.Module | None = None
    network: str = "mlp"
    batch_renorm: tuple[float, int] | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> tuple[jax.Array, jax.Array]:
        features = encode(self.encoder, obs)
        out = actor_body(self.hidden_sizes, 2 * self.act_dim, self.activation, self.network,
                         self.batch_renorm, train)(features)
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)


class CategoricalActor(nn.Module):
    """obs [B, ...] (an observation tree) -> logits [B, |A|] of a categorical policy over
    |A| actions. `encoder`: obs -> features first (None: the flat features); `network`:
    the body by name; `batch_renorm` and `train` as `Actor`'s."""

    num_actions: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    encoder: nn.Module | None = None
    network: str = "mlp"
    batch_renorm: tuple[float, int] | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> jax.Array:
        features = encode(self.encoder, obs)
        return actor_body(self.hidden_sizes, self.num_actions, self.activation, self.network,
                          self.batch_renorm, train)(features)


def train_mode(actor: nn.Module, variables: Any, obs: Any) -> tuple[Any, Any]:
    """(the actor's outputs at obs in train mode, its new state): CrossQ's batch-
    renormalized actor normalizes with the batch's statistics and moves its running
    ones ({"batch_stats": ...}); any other actor gives its usual outputs and {}."""
    return actor.apply(variables, obs, train=True, mutable=["batch_stats"])


def squashed_log_prob(pre_tanh: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """log π(tanh(u)) for u ~ N(mean, exp(log_std)²), summed over the last axis.

    pre_tanh, mean, log_std: [..., |A|] -> [...]. Uses
    log(1 - tanh²u) = 2(log 2 - u - softplus(-2u)), the numerically stable form.
    """
    std = jnp.exp(log_std)
    gaussian = -0.5 * ((pre_tanh - mean) / std) ** 2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
    log_det = 2.0 * (jnp.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh))
    return jnp.sum(gaussian - log_det, axis=-1)


def sample_action(
    mean: jax.Array, log_std: jax.Array, key: jax.Array, noise: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised draw a = tanh(mean + std·ε) and its log-probability.

    mean, log_std: [..., |A|] -> (action [..., |A|] in (-1, 1), log_prob [...]).
    noise: ε [..., |A|] (e.g. colored exploration noise, jaxsac.noise); None: drawn
        white, N(0, 1), from `key`.
    """
    if noise is None:
        noise = jax.random.normal(key, mean.shape, mean.dtype)
    pre_tanh = mean + jnp.exp(log_std) * noise
    return jnp.tanh(pre_tanh), squashed_log_prob(pre_tanh, mean, log_std)


def deterministic_action(mean: jax.Array) -> jax.Array:
    """The policy's mode in action space: tanh(mean), [..., |A|]."""
    return jnp.tanh(mean)


def categorical_log_probs(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(π [..., |A|], log π [..., |A|]) of a categorical policy's logits [..., |A|]."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return jnp.exp(log_probs), log_probs


@runtime_checkable
class PolicyHead(Protocol):
    """See the module docstring for shapes."""

    actor: nn.Module
    critic: CriticFamily

    def init(self, key: jax.Array, obs: ObsSpec | int) -> tuple[Any, Any]: ...

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: jax.Array | None = None) -> jax.Array: ...

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array: ...

    def critic_outputs(self, actor_params: Any, critic_variables: Any, target_variables: Any,
                       obs: jax.Array, action: jax.Array, next_obs: jax.Array,
                       alpha: jax.Array, key: jax.Array) -> tuple[Any, ...]: ...

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]: ...

    def auto_target_entropy(self, scale: float | None) -> float: ...


def init_networks(head: PolicyHead, key: jax.Array, obs: ObsSpec | int,
                  action: jax.Array | None = None) -> tuple[Any, Any]:
    """(actor_params, critic_params) of `head`'s networks: the actor from one observation
    [1, ...] of zeros (of the ObsSpec `obs`; an int d: [1, d] float32), the critics from
    it and `action` (a dummy action [1, |A|] for critics of (s, a); None for critics of
    s alone)."""
    actor_key, critic_key = jax.random.split(key)
    obs = obs_spec(obs, "init_networks").zeros((1,))
    return head.actor.init(actor_key, obs), head.critic.init(critic_key, obs, action)


class SquashedGaussianHead(NamedTuple):
    """Box actions: a tanh-squashed Gaussian; critics take (s, a). Expectations over
    π are one reparameterised sample (the continuous SAC of Haarnoja et al.)."""

    actor: Actor
    critic: CriticFamily
    act_dim: int

    def init(self, key: jax.Array, obs: ObsSpec | int) -> tuple[Any, Any]:
        return init_networks(self, key, obs, jnp.zeros((1, self.act_dim), jnp.float32))

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: jax.Array | None = None) -> jax.Array:
        return sample_action(*self.actor.apply(actor_params, obs), key, noise)[0]

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        return deterministic_action(self.actor.apply(actor_params, obs)[0])

    def critic_outputs(self, actor_params: Any, critic_variables: Any, target_variables: Any,
                       obs: jax.Array, action: jax.Array, next_obs: jax.Array,
                       alpha: jax.Array, key: jax.Array) -> tuple[Any, ...]:
        mean, log_std = self.actor.apply(actor_params, next_obs)
        next_action, log_prob = sample_action(mean, log_std, key)
        out, next_out, state = taken_and_next(self.critic, critic_variables, target_variables,
                                              obs, action, next_obs, next_action)
        return out, next_out, alpha * log_prob, None, state

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        (mean, log_std), _ = train_mode(self.actor, actor_params, obs)
        action, log_prob = sample_action(mean, log_std, key)
        policy_q = self.critic.value(self.critic.apply(critic_params, obs, action))
        return alpha * log_prob - policy_q, log_prob

    def auto_target_entropy(self, scale: float | None) -> float:
        """−scale · |A| (`target_entropy_ratio`; None: −|A|)."""
        return -float(self.act_dim) if scale is None else -float(scale) * self.act_dim


class CategoricalHead(NamedTuple):
    """Discrete actions: a categorical policy over |A| actions; critics give the value
    of every action. Expectations over π are exact sums over the actions
    (Christodoulou 2019)."""

    actor: CategoricalActor
    critic: CriticFamily
    num_actions: int

    def init(self, key: jax.Array, obs: ObsSpec | int) -> tuple[Any, Any]:
        return init_networks(self, key, obs)

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: None = None) -> jax.Array:
        if noise is not None:
            raise ValueError("CategoricalHead.sample: exploration noise is for Box actions")
        logits = self.actor.apply(actor_params, obs)
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        return jnp.argmax(self.actor.apply(actor_params, obs), axis=-1).astype(jnp.int32)

    def critic_outputs(self, actor_params: Any, critic_variables: Any, target_variables: Any,
                       obs: jax.Array, action: jax.Array, next_obs: jax.Array,
                       alpha: jax.Array, key: jax.Array) -> tuple[Any, ...]:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(self.actor.apply(actor_params, next_obs))
        out, next_out, state = taken_and_next(self.critic, critic_variables, target_variables,
                                              obs, None, next_obs, None)  # [N, B, |A|, *T]
        index = action.reshape((1, -1, 1) + (1,) * (out.ndim - 3))
        taken = jnp.take_along_axis(out, index, axis=2)[:, :, 0]
        return taken, next_out, alpha * log_probs, probs, state

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(train_mode(self.actor, actor_params, obs)[0])
        value = self.critic.value(self.critic.apply(critic_params, obs))  # [B, |A|]
        return (jnp.sum(probs * (alpha * log_probs - value), axis=-1),
                jnp.sum(probs * log_probs, axis=-1))

    def auto_target_entropy(self, scale: float | None) -> float:
        """scale · log|A| (scale None: DISCRETE_TARGET_ENTROPY_SCALE)."""
        scale = DISCRETE_TARGET_ENTROPY_SCALE if scale is None else scale
        return float(scale) * math.log(self.num_actions)


def _squashed_gaussian(actions: Any, settings: NetworkSettings, critic: CriticFamily,
                       encoder: Any) -> SquashedGaussianHead:
    low, high = ((LOG_STD_MIN, LOG_STD_MAX) if settings.log_std_bounds is None
                 else settings.log_std_bounds)
    return SquashedGaussianHead(Actor(actions.dim, settings.hidden_sizes, settings.activation,
                                      low, high, encoder, settings.network,
                                      actor_batch_renorm(settings)), critic, actions.dim)


def _categorical(actions: Any, settings: NetworkSettings, critic: CriticFamily,
                 encoder: Any) -> CategoricalHead:
    return CategoricalHead(CategoricalActor(actions.dim, settings.hidden_sizes,
                                            settings.activation, encoder, settings.network,
                                            actor_batch_renorm(settings)),
                           critic, actions.dim)


def actor_batch_renorm(settings: NetworkSettings) -> tuple[float, int] | None:
    """(momentum, warm-up) of a batch-renormalized actor (`actor_batch_renorm`), else None."""
    if not settings.actor_batch_renorm:
        return None
    return settings.batch_norm_momentum, settings.batch_renorm_warmup


HeadFactory = Callable[[Any, NetworkSettings, CriticFamily, Any], PolicyHead]
"""(action adapter, settings, critic family, the actor's encoder or None) -> the head."""

HEADS = Registry("policy head", "register_policy_head", {
    "continuous": (_squashed_gaussian, False), "discrete": (_categorical, True)})
"""(factory, whether the critics value every action) by action kind."""


def register_policy_head(kind: str, factory: HeadFactory, *, critics_value_every_action: bool
                         ) -> None:
    """Make action adapters of `kind` (ModuleActions.kind) train with `factory`'s head.
    critics_value_every_action: the critics give Q(s, ·) for every action (Discrete)
    instead of Q(s, a) for the given one (Box)."""
    HEADS.add(kind, (factory, bool(critics_value_every_action)), factory,
              "(actions, settings, critic, encoder) -> PolicyHead")


def policy_head(actions: Any, settings: Any = None, obs: ObsSpec | int | None = None
                ) -> PolicyHead:
    """The head of an action adapter (`jaxsac.connectors.module_actions`), chosen by its
    `kind` ("continuous": SquashedGaussianHead over `actions.dim` entries, "discrete":
    CategoricalHead over `actions.dim` actions, or a registered kind), with the encoder
    and critic family `settings` names, for observations `obs` (an ObsSpec, or an int d
    for flat observations [d]; needed by any encoder but the built-in "flat" and "auto",
    which is "flat" without it, and by `actor_obs_keys` / `critic_obs_keys`). The actor's
    encoder reads the observation's entries `settings.actor_obs_keys`, the critics'
    `settings.critic_obs_keys` (None: all of it); with `encoder_sharing="critic"` the
    actor's encoder is the critics', its features with the gradient stopped
    (`encoders.CriticFeatures`).

    settings: a NetworkSettings, or anything holding its fields (a SACConfig); None:
    the defaults."""
    settings = NetworkSettings.of(SACConfig() if settings is None else settings)
    if actions.kind not in HEADS:
        HEADS.missing("policy_head", "actions.kind", actions.kind)
    factory, every_action = HEADS[actions.kind]
    actor_encoder = make_encoder(settings.encoder, obs, settings.actor_obs_keys,
                                 "actor_obs_keys", settings)
    critic_encoder = make_encoder(settings.encoder, obs, settings.critic_obs_keys,
                                  "critic_obs_keys", settings)
    if settings.encoder_sharing == "critic" and critic_encoder is None:
        checks.fail("SACConfig", "encoder_sharing", "critic", "'separate' with the "
                    f"encoder {settings.encoder!r} of these observations, which has no "
                    "parameters to share (the flat features)")
    actor_encoder = ENCODER_SHARING[settings.encoder_sharing].actor_encoder(
        actor_encoder, critic_encoder)
    critic = make_critic(settings, actions.dim if every_action else 0, critic_encoder)
    head = factory(actions, settings, critic, actor_encoder)
    if not isinstance(head, PolicyHead):
        raise ValueError(f"the policy head registered for kind {actions.kind!r} returned "
                         f"{type(head).__name__}, which lacks PolicyHead's members")
    return head


def uses_builtin_networks(settings: Any) -> bool:
    """Whether `settings` (a NetworkSettings or a SACConfig) name only jaxsac's own
    encoder and critic family, whose code cannot change under the same name."""
    return settings.encoder in ENCODERS.builtins and settings.critic in CRITICS.builtins
