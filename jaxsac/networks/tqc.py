"""TQC: Truncated Quantile Critics (Kuznetsov et al., ICML 2020), `SACConfig.critic="tqc"`.

N critics (`num_q`) each output M quantiles (`num_quantiles`) of the return at the
quantile fractions τ_m = (m + ½)/M. The target pools the N·M quantiles the target
critics give at (s', a' ~ π), sorts them, drops the largest N·d (d
`quantiles_to_drop_per_net`) and shifts the K = N(M − d) that are left:
y_k = R + d_b·(z_(k) − α log π(a'|s')). Every current quantile is fitted to every target
atom with the quantile Huber loss (κ = 1). The actor maximizes the mean of all N·M
quantiles. TQC is defined for Box actions (one sampled a'); the family refuses Discrete
ones (docs/semantics.md, "TQC").

Shapes: B batch, N critics, M quantiles per critic, K kept target atoms.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxsac.networks.critics import QEnsemble, network_apply, network_init


def quantile_fractions(num_quantiles: int) -> jax.Array:
    """τ_m = (m + ½)/M [M], the fractions the quantiles are the quantiles of."""
    return (jnp.arange(num_quantiles, dtype=jnp.float32) + 0.5) / num_quantiles


def truncated_target(reward: jax.Array, discount: jax.Array, next_quantiles: jax.Array,
                     entropy: jax.Array, drop_per_net: int) -> jax.Array:
    """The TQC target atoms [B, K], K = N(M − drop_per_net), sorted ascending.

    reward, discount, entropy (α log π(a'|s')): [B]; next_quantiles: the target critics'
    quantiles at (s', a') [N, B, M]. The N·M quantiles of a sample are pooled and sorted;
    the largest N·drop_per_net are dropped."""
    num_nets, batch, num_quantiles = next_quantiles.shape
    pooled = jnp.sort(jnp.moveaxis(next_quantiles, 0, 1).reshape(batch, -1), axis=-1)
    kept = pooled[:, :num_nets * (num_quantiles - drop_per_net)]
    return reward[:, None] + discount[:, None] * (kept - entropy[:, None])


def quantile_huber_loss(quantiles: jax.Array, target: jax.Array) -> jax.Array:
    """ρ per critic and sample [N, B]: the mean over the M current quantiles and K
    target atoms of |τ_m − 1{δ < 0}| · huber(δ), δ = y_k − θ_m, huber with κ = 1.

    quantiles: [N, B, M]; target: [B, K]."""
    tau = quantile_fractions(quantiles.shape[-1])
    delta = target[None, :, None, :] - quantiles[..., None]  # [N, B, M, K]
    weight = jnp.abs(tau[:, None] - (delta < 0).astype(delta.dtype))
    return jnp.mean(weight * optax.huber_loss(delta, delta=1.0), axis=(-2, -1))


class TQCCritic(NamedTuple):
    """N quantile critics (`QEnsemble` with M outputs each); see the module docstring.

    The loss is mean_b w_b Σ_i ρ_i(b) (summed over critics, as the ensemble's), the TD
    error (1/N) Σ_i |mean_m θ_i,m − mean_k y_k|: each critic's mean against the target
    atoms' mean, in the units of the returns."""

    network: QEnsemble
    quantiles_to_drop_per_net: int = 2

    init = network_init
    apply = network_apply

    def q_values(self, out: jax.Array) -> jax.Array:
        """Each critic's mean quantile [N, B]."""
        return jnp.mean(out, axis=-1)

    def value(self, out: jax.Array) -> jax.Array:
        """The mean of all N·M quantiles [B]."""
        return jnp.mean(out, axis=(0, -1))

    def td_target(self, reward: jax.Array, discount: jax.Array, next_out: jax.Array,
                  entropy: jax.Array, probs: jax.Array | None) -> jax.Array:
        if probs is not None:
            raise ValueError("TQCCritic.td_target: TQC's target takes one sampled a' "
                             "(Box actions), not an expectation over every action")
        return truncated_target(reward, discount, next_out, entropy,
                                self.quantiles_to_drop_per_net)

    def loss(self, out_taken: jax.Array, target: jax.Array, weights: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
        loss = jnp.mean(weights * jnp.sum(quantile_huber_loss(out_taken, target), axis=0))
        td_error = jnp.abs(self.q_values(out_taken) - jnp.mean(target, axis=-1))
        return loss, jnp.mean(td_error, axis=0)
