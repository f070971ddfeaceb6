"""Policy heads: the action distribution of each kind of action space, with the
expectations over π the SAC losses take, chosen from the action adapter's `kind` at
assembly (`policy_head`).

The contract (`PolicyHead`), with B the batch, |A| the action dimension (Box) or the
number of actions (Discrete), and out the critic family's output (jaxsac.networks.critics):

    head.actor, head.critic              the actor network and the CriticFamily
    init(key, obs_dim) -> (actor_params, critic_params)
    sample(actor_params, obs [B, obs_dim], key, noise=None) -> actions [B, *action shape]
        (noise: a Box policy's ε [B, |A|] instead of white draws from key)
    mode(actor_params, obs) -> the deterministic actions [B, *action shape]
    q_taken(critic_params, obs, action [B, ...]) -> the critics' out at the taken
        actions [N, B, *T]
    soft_value(actor_params, critic_params, obs, alpha, key)
        -> E_{a~π}[next_value(out(s, a)) − α log π(a|s)] [B, *T] (the target's soft value)
    policy_objective(actor_params, critic_params, obs, alpha, key)
        -> (actor loss per sample [B], log π term [B]: its mean is minus the entropy)
    auto_target_entropy(scale) -> the target entropy of target_entropy="auto"

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
from jaxsac.networks.critics import CriticFamily, make_critic
from jaxsac.networks.encoders import make_encoder
from jaxsac.networks.layers import MLP
from jaxsac.networks.settings import NetworkSettings

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

DISCRETE_TARGET_ENTROPY_SCALE = 0.5
"""target_entropy="auto" for Discrete actions is this fraction of the largest entropy,
log|A| (docs/semantics.md, "Discrete actions": the common 0.98 lets α grow without
bound on two actions)."""


class Actor(nn.Module):
    """obs [..., obs_dim] -> (mean [..., |A|], log_std [..., |A|]), log_std clipped to
    [log_std_min, log_std_max] (default [-5, 2]). `encoder`: obs -> features first."""

    act_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    log_std_min: float = LOG_STD_MIN
    log_std_max: float = LOG_STD_MAX
    encoder: nn.Module | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = obs if self.encoder is None else self.encoder(obs)
        out = MLP(self.hidden_sizes, 2 * self.act_dim, self.activation)(features)
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)


class CategoricalActor(nn.Module):
    """obs [..., obs_dim] -> logits [..., |A|] of a categorical policy over |A| actions.
    `encoder`: obs -> features first."""

    num_actions: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    encoder: nn.Module | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        features = obs if self.encoder is None else self.encoder(obs)
        return MLP(self.hidden_sizes, self.num_actions, self.activation)(features)


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


def _trailing(x: jax.Array, like: jax.Array) -> jax.Array:
    """x [B(, |A|)] with an axis of size 1 appended for each trailing value axis of `like`
    ([B(, |A|), *T]), so it broadcasts against it; x itself for scalar values."""
    return x.reshape(x.shape + (1,) * (like.ndim - x.ndim))


@runtime_checkable
class PolicyHead(Protocol):
    """See the module docstring for shapes."""

    actor: nn.Module
    critic: CriticFamily

    def init(self, key: jax.Array, obs_dim: int) -> tuple[Any, Any]: ...

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: jax.Array | None = None) -> jax.Array: ...

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array: ...

    def q_taken(self, critic_params: Any, obs: jax.Array, action: jax.Array) -> jax.Array: ...

    def soft_value(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                   alpha: jax.Array, key: jax.Array) -> jax.Array: ...

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]: ...

    def auto_target_entropy(self, scale: float | None) -> float: ...


def init_networks(head: PolicyHead, key: jax.Array, obs_dim: int,
                  action: jax.Array | None = None) -> tuple[Any, Any]:
    """(actor_params, critic_params) of `head`'s networks: the actor from one observation
    [1, obs_dim] of zeros, the critics from it and `action` (a dummy action [1, |A|] for
    critics of (s, a); None for critics of s alone)."""
    actor_key, critic_key = jax.random.split(key)
    obs = jnp.zeros((1, obs_dim), jnp.float32)
    return head.actor.init(actor_key, obs), head.critic.init(critic_key, obs, action)


class SquashedGaussianHead(NamedTuple):
    """Box actions: a tanh-squashed Gaussian; critics take (s, a). Expectations over
    π are one reparameterised sample (the continuous SAC of Haarnoja et al.)."""

    actor: Actor
    critic: CriticFamily
    act_dim: int

    def init(self, key: jax.Array, obs_dim: int) -> tuple[Any, Any]:
        return init_networks(self, key, obs_dim, jnp.zeros((1, self.act_dim), jnp.float32))

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: jax.Array | None = None) -> jax.Array:
        return sample_action(*self.actor.apply(actor_params, obs), key, noise)[0]

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        return deterministic_action(self.actor.apply(actor_params, obs)[0])

    def q_taken(self, critic_params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        return self.critic.apply(critic_params, obs, action)

    def soft_value(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                   alpha: jax.Array, key: jax.Array) -> jax.Array:
        mean, log_std = self.actor.apply(actor_params, obs)
        action, log_prob = sample_action(mean, log_std, key)
        next_value = self.critic.next_value(self.critic.apply(critic_params, obs, action))
        return next_value - alpha * _trailing(log_prob, next_value)

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, log_std = self.actor.apply(actor_params, obs)
        action, log_prob = sample_action(mean, log_std, key)
        policy_q = self.critic.value(self.critic.apply(critic_params, obs, action))
        return alpha * log_prob - policy_q, log_prob

    def auto_target_entropy(self, scale: float | None) -> float:
        """−|A| (`scale` is a discrete-only setting and is None here)."""
        return -float(self.act_dim)


class CategoricalHead(NamedTuple):
    """Discrete actions: a categorical policy over |A| actions; critics give the value
    of every action. Expectations over π are exact sums over the actions
    (Christodoulou 2019)."""

    actor: CategoricalActor
    critic: CriticFamily
    num_actions: int

    def init(self, key: jax.Array, obs_dim: int) -> tuple[Any, Any]:
        return init_networks(self, key, obs_dim)

    def sample(self, actor_params: Any, obs: jax.Array, key: jax.Array,
               noise: None = None) -> jax.Array:
        if noise is not None:
            raise ValueError("CategoricalHead.sample: exploration noise is for Box actions")
        logits = self.actor.apply(actor_params, obs)
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    def mode(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        return jnp.argmax(self.actor.apply(actor_params, obs), axis=-1).astype(jnp.int32)

    def q_taken(self, critic_params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        out = self.critic.apply(critic_params, obs)  # [N, B, |A|, *T]
        index = action.reshape((1, -1, 1) + (1,) * (out.ndim - 3))
        return jnp.take_along_axis(out, index, axis=2)[:, :, 0]

    def soft_value(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                   alpha: jax.Array, key: jax.Array) -> jax.Array:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(self.actor.apply(actor_params, obs))
        next_value = self.critic.next_value(self.critic.apply(critic_params, obs))
        return jnp.sum(_trailing(probs, next_value)
                       * (next_value - alpha * _trailing(log_probs, next_value)), axis=1)

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(self.actor.apply(actor_params, obs))
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
                                      low, high, encoder), critic, actions.dim)


def _categorical(actions: Any, settings: NetworkSettings, critic: CriticFamily,
                 encoder: Any) -> CategoricalHead:
    return CategoricalHead(CategoricalActor(actions.dim, settings.hidden_sizes,
                                            settings.activation, encoder), critic, actions.dim)


HeadFactory = Callable[[Any, NetworkSettings, CriticFamily, Any], PolicyHead]
"""(action adapter, settings, critic family, encoder or None) -> the head."""

_HEADS: dict[str, tuple[HeadFactory, bool]] = {
    "continuous": (_squashed_gaussian, False), "discrete": (_categorical, True)}


def register_policy_head(kind: str, factory: HeadFactory, *, critics_value_every_action: bool
                         ) -> None:
    """Make action adapters of `kind` (ModuleActions.kind) train with `factory`'s head.
    critics_value_every_action: the critics give Q(s, ·) for every action (Discrete)
    instead of Q(s, a) for the given one (Box)."""
    if not isinstance(kind, str) or not kind or kind in ("continuous", "discrete"):
        checks.fail("register_policy_head", "kind", kind,
                    "a non-empty string other than the built-in 'continuous' and 'discrete'")
    if not callable(factory):
        checks.fail("register_policy_head", "factory", factory,
                    "callable (actions, settings, critic, encoder) -> PolicyHead")
    _HEADS[kind] = (factory, bool(critics_value_every_action))


def policy_head(actions: Any, settings: Any = None, obs_dim: int | None = None
                ) -> PolicyHead:
    """The head of an action adapter (`jaxsac.connectors.module_actions`), chosen by its
    `kind` ("continuous": SquashedGaussianHead over `actions.dim` entries, "discrete":
    CategoricalHead over `actions.dim` actions, or a registered kind), with the encoder
    and critic family `settings` names, for observations of obs_dim entries.

    settings: a NetworkSettings, or anything holding its fields (a SACConfig); None:
    the defaults."""
    settings = NetworkSettings.of(SACConfig() if settings is None else settings)
    if actions.kind not in _HEADS:
        raise ValueError(f"action adapter {actions!r} has kind={actions.kind!r}, which has no "
                         f"policy head; kinds with one: {sorted(_HEADS)} "
                         "(jaxsac.networks.register_policy_head adds one)")
    factory, every_action = _HEADS[actions.kind]
    encoder = make_encoder(settings.encoder, obs_dim or 0)
    critic = make_critic(settings, actions.dim if every_action else 0, encoder)
    return factory(actions, settings, critic, encoder)
