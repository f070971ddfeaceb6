"""Batch renormalization (Ioffe 2017, "Batch Renormalization"), CrossQ's normalization.

A feature's input x [..., F] is normalized over every axis but the last. In train mode
with the batch's mean μ_B and σ_B = √(var_B + ε), and the running statistics μ, var
(σ = √(var + ε)):

    x̂ = (x − μ_B)/σ_B · r + d,   r = clip(σ_B/σ, 1/r_max, r_max),
                                  d = clip((μ_B − μ)/σ, −d_max, d_max), no gradient

with r = 1, d = 0 (plain batch normalization) for the first `warmup_steps` train-mode
calls; then μ ← mμ + (1 − m)μ_B, var ← m·var + (1 − m)var_B (m = `momentum`, var_B the
biased batch variance). In eval mode x̂ = (x − μ)/σ and nothing changes. Both end with
y = γ x̂ + β (learnable scale and bias [F]). The running statistics and the count of
train-mode calls are the "batch_stats" collection: not parameters, updated by applying
the module with mutable=["batch_stats"].
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

R_MAX = 3.0
"""The largest correction r of the batch's scale (and 1/R_MAX the smallest)."""
D_MAX = 5.0
"""The largest correction |d| of the batch's mean, in running standard deviations."""


class BatchRenorm(nn.Module):
    """See the module docstring. x [..., F] -> [..., F]; `train` picks the mode."""

    momentum: float = 0.99
    warmup_steps: int = 100_000
    epsilon: float = 1e-3

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        features = x.shape[-1]
        mean = self.variable("batch_stats", "mean", jnp.zeros, (features,), jnp.float32)
        var = self.variable("batch_stats", "var", jnp.ones, (features,), jnp.float32)
        steps = self.variable("batch_stats", "steps", jnp.zeros, (), jnp.int32)
        scale = self.param("scale", nn.initializers.ones, (features,))
        bias = self.param("bias", nn.initializers.zeros, (features,))

        if not train:
            normalized = (x - mean.value) / jnp.sqrt(var.value + self.epsilon)
        else:
            axes = tuple(range(x.ndim - 1))
            batch_mean = jnp.mean(x, axis=axes)
            batch_var = jnp.mean(jnp.square(x - batch_mean), axis=axes)
            batch_std = jnp.sqrt(batch_var + self.epsilon)
            running_std = jnp.sqrt(var.value + self.epsilon)
            renorm = steps.value >= self.warmup_steps
            r = jnp.clip(batch_std / running_std, 1.0 / R_MAX, R_MAX)
            d = jnp.clip((batch_mean - mean.value) / running_std, -D_MAX, D_MAX)
            r = jax.lax.stop_gradient(jnp.where(renorm, r, 1.0))
            d = jax.lax.stop_gradient(jnp.where(renorm, d, 0.0))
            normalized = (x - batch_mean) / batch_std * r + d
            if not self.is_initializing():
                m = self.momentum
                mean.value = m * mean.value + (1.0 - m) * jax.lax.stop_gradient(batch_mean)
                var.value = m * var.value + (1.0 - m) * jax.lax.stop_gradient(batch_var)
                steps.value = steps.value + 1
        return normalized * scale + bias
