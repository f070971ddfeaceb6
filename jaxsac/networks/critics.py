"""Critic families: the critics' networks, the TD target built from them and the loss
that fits them, chosen by name (`SACConfig.critic`) at assembly.

The contract (`CriticFamily`) is what the learner and the policy heads need:

    params = family.init(key, obs [1, ...], action [1, |A|] or None)
    out = family.apply(params, obs [B, ...], action [B, |A|] or None)
        (obs: an observation tree, jaxsac.observations)
        -> [N, B, *T] for Box actions, [N, B, |A|, *T] for Discrete ones (every
           action's): N ensemble members, T the family's trailing output shape (() for
           Q-values, (K,) for K quantiles, or K logits over a fixed support)
    family.q_values(out) -> [N, B(, |A|)] each member's expected return (the metrics)
    family.value(out) -> [B(, |A|)]       the expected return the policy maximizes
    family.td_target(reward [B], discount [B], next_out, entropy, probs) -> target
        next_out: out at (s', a' ~ π) [N, B, *T] (Box), or at s' for every action
        [N, B, |A|, *T] (Discrete); entropy: α log π(a'|s') [B], or [B, |A|] for every
        action; probs: None (a' was sampled), or π(·|s') [B, |A|] to take the
        expectation over actions with. The target's shape is the family's own ([B] for
        Q-values, [B, K] for distributions).
    family.loss(out_taken [N, B, *T], target, weights [B]) -> (loss [], td_error [B])
        td_error is what prioritized replay turns into priorities

Two optional members (`taken_and_next`, the function, reads them):

    family.taken_and_next(variables, target_variables, obs, action, next_obs, next_action)
        -> (out at (s, a), out at (s', a'), the new state); without it, `apply` at
        (s, a) with the online and at (s', a') with the target parameters
    family.target_network: False for a family whose target is built from the online
        critics (the learner then keeps no target copy, {})

A family's state is its flax variables outside the "params" collection (CrossQ's
"batch_stats"): not differentiated, optimized or copied into a target, passed back in
with the parameters (`with_state`) and replaced by what `taken_and_next` returns.

The policy head gives the family what only the policy knows (next actions, α log π,
action probabilities); the family builds the target from them, so a distributional
family projects or shifts its own support there. "ensemble" is the first family: N
independent Q-functions, the minimum of them as the value and in the target
(docs/semantics.md); "tqc" (jaxsac.networks.tqc) and "categorical"
(jaxsac.networks.categorical_critic) are distributional; "crossq"
(jaxsac.networks.crossq) has batch renormalization and no target network. Another
family plugs in by name (jaxsac.networks.families):

    jaxsac.networks.register_critic("mine", lambda settings, num_actions, encoder: Mine(...))
    config = jaxsac.SACConfig(critic="mine")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxsac.networks.bodies import BODIES
from jaxsac.networks.encoders import encode


@runtime_checkable
class CriticFamily(Protocol):
    """See the module docstring for shapes."""

    def init(self, key: jax.Array, obs: jax.Array, action: jax.Array | None = None
             ) -> Any: ...

    def apply(self, params: Any, obs: jax.Array, action: jax.Array | None = None
              ) -> jax.Array: ...

    def q_values(self, out: jax.Array) -> jax.Array: ...

    def value(self, out: jax.Array) -> jax.Array: ...

    def td_target(self, reward: jax.Array, discount: jax.Array, next_out: jax.Array,
                  entropy: jax.Array, probs: jax.Array | None) -> jax.Array: ...

    def loss(self, out_taken: jax.Array, target: jax.Array, weights: jax.Array
             ) -> tuple[jax.Array, jax.Array]: ...


class QEnsemble(nn.Module):
    """N critics as one module: parameters carry a leading axis N.

    Continuous (num_actions=0): `__call__(obs [B, ...], action [B, |A|]) -> q [N, B]`.
    Discrete (num_actions=|A|): `__call__(obs [B, ...]) -> q [N, B, |A|]`, the value
    of every action (obs: an observation tree). `layer_norm`: LayerNorm after each hidden
    activation. `encoder`: a flax module obs -> features the N critics share (None: the
    flat features, `encoders.encode`). `outputs`:
    0 for one value per action, K for K values (quantiles, logits), a trailing axis
    [N, B(, |A|), K]. `network`: each critic's body by name (jaxsac.networks.bodies);
    `unit_readout`: its SimbaV2 last layer is a unit-norm one (`SimbaV2Body`).

    The parameters are those of `nn.vmap(body)` (`nn.vmap(MLP)` by default): created by
    it, so each critic has its own initial draw, and stacked along axis 0 (the layout of
    every checkpoint). Without LayerNorm the forward pass is the vmapped module, one
    batched pass over the critics. With LayerNorm it applies each critic's slice in turn,
    which is faster on the CPU (docs/performance.md, "The critic ensemble").
    """

    num_q: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_actions: int = 0
    layer_norm: bool = False
    encoder: nn.Module | None = None
    outputs: int = 0
    network: str = "mlp"
    unit_readout: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array | None = None) -> jax.Array:
        features = encode(self.encoder, obs)
        x = features if self.num_actions else jnp.concatenate([features, action], axis=-1)
        out_dim = (self.num_actions or 1) * max(self.outputs, 1)
        mlp_fields = (self.hidden_sizes, out_dim, self.activation, self.layer_norm)
        body = BODIES[self.network]
        readout = {"unit_readout": True} if self.unit_readout else {}
        critics = nn.vmap(
            body,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_q,
        )(*mlp_fields, **readout)
        if self.is_initializing() or not self.layer_norm:
            q = critics(x)
        else:
            stacked = critics.variables["params"]
            held = jax.tree.leaves(stacked)[0].shape[0]
            if held != self.num_q:
                raise ValueError(f"QEnsemble(num_q={self.num_q}) was given the parameters "
                                 f"of {held} critics")
            critic = body(*mlp_fields, **readout, parent=None)  # unbound: applied to each slice
            q = jnp.stack([
                critic.apply({"params": jax.tree.map(lambda p, i=i: p[i], stacked)}, x)
                for i in range(self.num_q)])
        if self.outputs:
            per_action = (self.num_actions,) if self.num_actions else ()
            return q.reshape(q.shape[:-1] + per_action + (self.outputs,))
        return q if self.num_actions else q[..., 0]


def element_loss(kind: str, error: jax.Array) -> jax.Array:
    """ℓ(x): ½x² ("mse") or Huber with δ = 1 ("huber"), elementwise."""
    if kind == "huber":
        return optax.huber_loss(error, delta=1.0)
    return 0.5 * jnp.square(error)


def split_state(variables: Any) -> tuple[Any, Any]:
    """(parameters, state) of a family's variables: ({"params": ...}, the other flax
    collections) for a dict of collections; (variables, {}) for anything else."""
    if isinstance(variables, Mapping) and "params" in variables:
        return ({"params": variables["params"]},
                {name: value for name, value in variables.items() if name != "params"})
    return variables, {}


def with_state(params: Any, state: Any) -> Any:
    """The variables `apply` takes: `params` with the collections of `state` ({}: params)."""
    return {**params, **state} if state else params


def has_target_network(family: Any) -> bool:
    """Whether the learner keeps target critics for `family` (its `target_network`)."""
    return bool(getattr(family, "target_network", True))


def taken_and_next(family: Any, variables: Any, target_variables: Any, obs: jax.Array,
                   action: jax.Array | None, next_obs: jax.Array,
                   next_action: jax.Array | None) -> tuple[jax.Array, jax.Array, Any]:
    """(out at (s, a) [N, B, *T], out at (s', a'), the family's new state): the family's
    own `taken_and_next`, else `apply` with `target_variables` at (s', a') and with
    `variables` at (s, a), the state as it was. action, next_action: None for critics
    of s alone (every action's out)."""
    joint = getattr(family, "taken_and_next", None)
    if joint is not None:
        return joint(variables, target_variables, obs, action, next_obs, next_action)
    next_out = family.apply(target_variables, next_obs, next_action)
    return family.apply(variables, obs, action), next_out, split_state(variables)[1]


def network_init(family: Any, key: jax.Array, obs: jax.Array,
                 action: jax.Array | None = None) -> Any:
    """`CriticFamily.init` of a family whose critics are its `network` (a QEnsemble)."""
    return family.network.init(key, obs, action)


def network_apply(family: Any, params: Any, obs: jax.Array,
                  action: jax.Array | None = None) -> jax.Array:
    """`CriticFamily.apply` of a family whose critics are its `network` (a QEnsemble)."""
    return family.network.apply(params, obs, action)


class EnsembleCritic(NamedTuple):
    """N Q-functions (`QEnsemble`): the value is min_i Q_i, the target
    y = r + d·E_π[min_i Q̄_i(s', a') − α log π(a'|s')], the loss mean_B w·Σ_i ℓ(Q_i − y)
    and the TD error mean_i |Q_i − y| (docs/semantics.md, "Losses")."""

    network: QEnsemble
    loss_kind: str = "mse"

    init = network_init
    apply = network_apply

    def q_values(self, out: jax.Array) -> jax.Array:
        return out

    def value(self, out: jax.Array) -> jax.Array:
        return jnp.min(out, axis=0)

    def td_target(self, reward: jax.Array, discount: jax.Array, next_out: jax.Array,
                  entropy: jax.Array, probs: jax.Array | None) -> jax.Array:
        soft_value = self.value(next_out) - entropy  # [B], or [B, |A|] for every action
        if probs is not None:
            soft_value = jnp.sum(probs * soft_value, axis=-1)
        return reward + discount * soft_value

    def loss(self, out_taken: jax.Array, target: jax.Array, weights: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
        error = out_taken - target
        loss = jnp.mean(weights * jnp.sum(element_loss(self.loss_kind, error), 0))
        return loss, jnp.mean(jnp.abs(error), axis=0)
