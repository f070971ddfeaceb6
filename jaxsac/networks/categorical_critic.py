"""Categorical critics over a fixed support, `SACConfig.critic="categorical"`.

N critics (`num_q`) each output K logits (`num_atoms`) over the atoms
z_j = v_min + jΔ, Δ = (v_max − v_min)/(K − 1): a distribution of the return with
probabilities softmax(logits) and expected value Σ_j p_j z_j. The target distribution is
either C51's (Bellemare et al. 2017: the target critic's atoms shifted to
R + d·(z_j − α log π) and projected back onto the support) or HL-Gauss (Farebrother et
al. 2024: a normal of standard deviation σ = `hl_gauss_sigma`·Δ around the scalar
target, integrated over the bins [z_j − Δ/2, z_j + Δ/2]); the loss is the cross-entropy.
Twin (N) critics: the value is the smallest of the N expected values, and the C51 target
takes the distribution of that critic (docs/semantics.md, "Categorical critic").

Shapes: B batch, N critics, K atoms, |A| actions (Discrete).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxsac.networks.critics import QEnsemble, network_apply, network_init

TARGETS = ("c51", "hl_gauss")


def atom_spacing(v_min: float, v_max: float, num_atoms: int) -> float:
    """Δ, the distance between neighbouring atoms."""
    return (v_max - v_min) / (num_atoms - 1)


def c51_projection(atoms: jax.Array, probs: jax.Array, v_min: float, v_max: float,
                   num_atoms: int) -> jax.Array:
    """C51's projection [..., K] of the distribution with probabilities probs [..., M] at
    atoms [..., M] onto the support: each atom, clipped to [v_min, v_max], splits its
    probability between its two neighbouring support atoms in proportion to closeness
    (all of it to one support atom it lands on)."""
    support = jnp.linspace(v_min, v_max, num_atoms, dtype=atoms.dtype)
    clipped = jnp.clip(atoms, v_min, v_max)
    closeness = 1.0 - jnp.abs(clipped[..., None] - support) / atom_spacing(v_min, v_max,
                                                                           num_atoms)
    return jnp.sum(probs[..., None] * jnp.clip(closeness, 0.0, 1.0), axis=-2)


def hl_gauss_probs(target: jax.Array, v_min: float, v_max: float, num_atoms: int,
                   sigma: float) -> jax.Array:
    """HL-Gauss [..., K]: the mass of N(y, (σΔ)²) on each atom's bin
    [z_j − Δ/2, z_j + Δ/2], normalised over the K bins; y = target [...] clipped to
    [v_min, v_max]. `sigma` is in atom spacings."""
    spacing = atom_spacing(v_min, v_max, num_atoms)
    edges = jnp.linspace(v_min - spacing / 2, v_max + spacing / 2, num_atoms + 1,
                         dtype=target.dtype)
    centred = edges - jnp.clip(target, v_min, v_max)[..., None]
    cdf = jax.scipy.special.erf(centred / (math.sqrt(2.0) * sigma * spacing))
    return (cdf[..., 1:] - cdf[..., :-1]) / (cdf[..., -1:] - cdf[..., :1])


class CategoricalCritic(NamedTuple):
    """N critics of K logits each (`QEnsemble` with K outputs); see the module docstring.

    The loss is mean_b w_b Σ_i CE_i(b), CE_i(b) = −Σ_j m_b,j log p_i,j(s_b, a_b) against
    the target distribution m [B, K]; the TD error (1/N) Σ_i |E_i[Z(s_b, a_b)] − Σ_j m_b,j z_j|,
    each critic's expected value against the target's, in the units of the returns."""

    network: QEnsemble
    v_min: float
    v_max: float
    target_kind: str = "c51"
    hl_gauss_sigma: float = 0.75

    @property
    def num_atoms(self) -> int:
        return self.network.outputs

    def support(self) -> jax.Array:
        """The atoms z [K]."""
        return jnp.linspace(self.v_min, self.v_max, self.num_atoms, dtype=jnp.float32)

    init = network_init
    apply = network_apply

    def q_values(self, out: jax.Array) -> jax.Array:
        """Each critic's expected return [N, B(, |A|)]."""
        return jnp.sum(jax.nn.softmax(out, axis=-1) * self.support(), axis=-1)

    def value(self, out: jax.Array) -> jax.Array:
        """The smallest of the N expected returns [B(, |A|)]."""
        return jnp.min(self.q_values(out), axis=0)

    def td_target(self, reward: jax.Array, discount: jax.Array, next_out: jax.Array,
                  entropy: jax.Array, probs: jax.Array | None) -> jax.Array:
        """The target distribution [B, K]. next_out: logits at (s', a') [N, B, K] or at
        s' for every action [N, B, |A|, K]; entropy α log π [B] or [B, |A|]; probs None
        or π(·|s') [B, |A|]."""
        expected = self.q_values(next_out)  # [N, B(, |A|)]
        if self.target_kind == "hl_gauss":
            soft_value = jnp.min(expected, axis=0) - entropy
            if probs is not None:
                soft_value = jnp.sum(probs * soft_value, axis=-1)
            return hl_gauss_probs(reward + discount * soft_value, self.v_min, self.v_max,
                                  self.num_atoms, self.hl_gauss_sigma)
        lowest = jnp.argmin(expected, axis=0)[None, ..., None]  # the critic with min E[Z]
        next_probs = jnp.take_along_axis(jax.nn.softmax(next_out, axis=-1), lowest, 0)[0]
        per_row = (-1,) + (1,) * entropy.ndim
        atoms = (reward.reshape(per_row) + discount.reshape(per_row)
                 * (self.support() - entropy[..., None]))  # [B(, |A|), K]
        if probs is not None:  # the mixture over a' ~ π: one distribution of |A|·K atoms
            batch = reward.shape[0]
            next_probs = (probs[..., None] * next_probs).reshape(batch, -1)
            atoms = atoms.reshape(batch, -1)
        return c51_projection(atoms, next_probs, self.v_min, self.v_max, self.num_atoms)

    def loss(self, out_taken: jax.Array, target: jax.Array, weights: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
        cross_entropy = -jnp.sum(target * jax.nn.log_softmax(out_taken, axis=-1), axis=-1)
        loss = jnp.mean(weights * jnp.sum(cross_entropy, axis=0))
        target_mean = jnp.sum(target * self.support(), axis=-1)
        return loss, jnp.mean(jnp.abs(self.q_values(out_taken) - target_mean), axis=0)
