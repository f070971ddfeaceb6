"""SAC networks (flax.linen) and the policy heads: the action distribution of each kind
of action space, with the expectations the SAC losses take over it.

    policy_head(actions, config)  # SquashedGaussianHead for a Box, CategoricalHead for Discrete

Shapes: B is the batch size, |A| the action dimension (Box) or the number of actions
(Discrete), N the number of critics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nn.relu,
    "tanh": nn.tanh,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "leaky_relu": nn.leaky_relu,
}


# Kernels start uniform in ±1/sqrt(fan_in), as PyTorch's nn.Linear default kernels do (the
# reference implementation's); biases start at zero (PyTorch draws them in the same
# range). On the tuned Pendulum-v1 this learns more reliably than flax's default
# lecun_normal, whose weights are √3 times larger.
KERNEL_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


class MLP(nn.Module):
    """Dense layers with `activation` between them; the last layer is linear.
    `layer_norm`: a LayerNorm after each hidden activation (brax's order)."""

    hidden_sizes: Sequence[int]
    out_dim: int
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=KERNEL_INIT)(x))
            if self.layer_norm:
                x = nn.LayerNorm()(x)
        return nn.Dense(self.out_dim, kernel_init=KERNEL_INIT)(x)


class Actor(nn.Module):
    """obs [..., obs_dim] -> (mean [..., |A|], log_std [..., |A|]), log_std clipped to
    [log_std_min, log_std_max] (default [-5, 2])."""

    act_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    log_std_min: float = LOG_STD_MIN
    log_std_max: float = LOG_STD_MAX

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = MLP(self.hidden_sizes, 2 * self.act_dim, self.activation)(obs)
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)


class CategoricalActor(nn.Module):
    """obs [..., obs_dim] -> logits [..., |A|] of a categorical policy over |A| actions."""

    num_actions: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.hidden_sizes, self.num_actions, self.activation)(obs)


class QEnsemble(nn.Module):
    """N critics as one module: parameters carry a leading axis N.

    Continuous (num_actions=0): `__call__(obs [B, obs_dim], action [B, |A|]) -> q [N, B]`.
    Discrete (num_actions=|A|): `__call__(obs [B, obs_dim]) -> q [N, B, |A|]`, the value
    of every action. `layer_norm`: LayerNorm after each hidden activation.

    The parameters are those of `nn.vmap(MLP)`: created by it, so each critic has its
    own initial draw, and stacked along axis 0 (the layout of every checkpoint). Without
    LayerNorm the forward pass is the vmapped module, one batched pass over the critics.
    With LayerNorm it applies each critic's slice in turn: on the CPU, with two critics,
    that was 11-12% faster per update, where without LayerNorm it was 5% slower at batch
    256 (docs/performance.md, "The critic ensemble").
    """

    num_q: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_actions: int = 0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array | None = None) -> jax.Array:
        x = obs if self.num_actions else jnp.concatenate([obs, action], axis=-1)
        mlp_fields = (self.hidden_sizes, self.num_actions or 1, self.activation, self.layer_norm)
        critics = nn.vmap(
            MLP,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_q,
        )(*mlp_fields)
        if self.is_initializing() or not self.layer_norm:
            q = critics(x)
        else:
            stacked = critics.variables["params"]
            held = jax.tree.leaves(stacked)[0].shape[0]
            if held != self.num_q:
                raise ValueError(f"QEnsemble(num_q={self.num_q}) was given the parameters "
                                 f"of {held} critics")
            critic = MLP(*mlp_fields, parent=None)  # unbound: applied to each slice
            q = jnp.stack([
                critic.apply({"params": jax.tree.map(lambda p, i=i: p[i], stacked)}, x)
                for i in range(self.num_q)])
        return q if self.num_actions else q[..., 0]


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


# --- policy heads ---------------------------------------------------------------------
# A head holds a run's actor and critic networks and the operations the learner needs:
#   init(key, obs_dim) -> (actor_params, critic_params)
#   sample(actor_params, obs [B, obs_dim], key, noise=None) -> actions [B, *action shape]
#       (noise: a Box policy's ε [B, |A|] instead of white draws from key)
#   mode(actor_params, obs) -> the deterministic actions [B, *action shape]
#   q_taken(critic_params, obs, action [B, ...]) -> Q_i(s, a) [N, B]
#   soft_value(actor_params, critic_params, obs, alpha, key)
#       -> E_{a~π}[min_i Q_i(s, a) − α log π(a|s)] [B] (the target's soft state value)
#   policy_objective(actor_params, critic_params, obs, alpha, key)
#       -> (actor loss per sample [B], log π term [B]: its mean is minus the entropy)
#   auto_target_entropy(scale) -> the target entropy of target_entropy="auto"


def init_networks(head: Any, key: jax.Array, obs_dim: int, *critic_inputs: jax.Array
                  ) -> tuple[Any, Any]:
    """(actor_params, critic_params) of `head`'s networks: the actor from one observation
    [1, obs_dim] of zeros, the critics from it and `critic_inputs` (a dummy action)."""
    actor_key, critic_key = jax.random.split(key)
    obs = jnp.zeros((1, obs_dim), jnp.float32)
    return head.actor.init(actor_key, obs), head.critic.init(critic_key, obs, *critic_inputs)


class SquashedGaussianHead(NamedTuple):
    """Box actions: a tanh-squashed Gaussian; critics take (s, a). Expectations over
    π are one reparameterised sample (the continuous SAC of Haarnoja et al.)."""

    actor: Actor
    critic: QEnsemble
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
        q = self.critic.apply(critic_params, obs, action)
        return jnp.min(q, axis=0) - alpha * log_prob

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, log_std = self.actor.apply(actor_params, obs)
        action, log_prob = sample_action(mean, log_std, key)
        policy_q = jnp.min(self.critic.apply(critic_params, obs, action), axis=0)
        return alpha * log_prob - policy_q, log_prob

    def auto_target_entropy(self, scale: float | None) -> float:
        """−|A| (`scale` is a discrete-only setting and is None here)."""
        return -float(self.act_dim)


class CategoricalHead(NamedTuple):
    """Discrete actions: a categorical policy over |A| actions; critics give Q(s, ·).
    Expectations over π are exact sums over the actions (Christodoulou 2019)."""

    actor: CategoricalActor
    critic: QEnsemble
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
        q = self.critic.apply(critic_params, obs)  # [N, B, |A|]
        return jnp.take_along_axis(q, action[None, :, None], axis=-1)[..., 0]

    def soft_value(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                   alpha: jax.Array, key: jax.Array) -> jax.Array:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(self.actor.apply(actor_params, obs))
        min_q = jnp.min(self.critic.apply(critic_params, obs), axis=0)  # [B, |A|]
        return jnp.sum(probs * (min_q - alpha * log_probs), axis=-1)

    def policy_objective(self, actor_params: Any, critic_params: Any, obs: jax.Array,
                         alpha: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        del key  # exact expectation
        probs, log_probs = categorical_log_probs(self.actor.apply(actor_params, obs))
        min_q = jnp.min(self.critic.apply(critic_params, obs), axis=0)
        return (jnp.sum(probs * (alpha * log_probs - min_q), axis=-1),
                jnp.sum(probs * log_probs, axis=-1))

    def auto_target_entropy(self, scale: float | None) -> float:
        """scale · log|A| (scale None: DISCRETE_TARGET_ENTROPY_SCALE)."""
        scale = DISCRETE_TARGET_ENTROPY_SCALE if scale is None else scale
        return float(scale) * math.log(self.num_actions)


DISCRETE_TARGET_ENTROPY_SCALE = 0.5
"""target_entropy="auto" for Discrete actions is this fraction of the largest entropy,
log|A| (docs/semantics.md, "Discrete actions": the common 0.98 lets α grow without
bound on two actions)."""

PolicyHead = SquashedGaussianHead | CategoricalHead


def policy_head(actions: Any, hidden_sizes: Sequence[int] = (256, 256),
                activation: str = "relu", num_q: int = 2,
                log_std_bounds: tuple[float, float] | None = None,
                critic_layer_norm: bool = False) -> PolicyHead:
    """The head of an action adapter (`jaxsac.connectors.module_actions`): its `kind`
    "continuous" gives a SquashedGaussianHead over `actions.dim` entries, "discrete" a
    CategoricalHead over `actions.dim` actions. `critic_layer_norm`: LayerNorm in the
    critics' hidden layers."""
    if actions.kind == "discrete":
        return CategoricalHead(CategoricalActor(actions.dim, hidden_sizes, activation),
                               QEnsemble(num_q, hidden_sizes, activation, actions.dim,
                                         critic_layer_norm), actions.dim)
    low, high = (LOG_STD_MIN, LOG_STD_MAX) if log_std_bounds is None else log_std_bounds
    return SquashedGaussianHead(Actor(actions.dim, hidden_sizes, activation, low, high),
                                QEnsemble(num_q, hidden_sizes, activation,
                                          layer_norm=critic_layer_norm), actions.dim)
