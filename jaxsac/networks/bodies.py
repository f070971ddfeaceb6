"""The network bodies the actor and the critics are built from, chosen by name
(`SACConfig.network`): "mlp" (`layers.MLP`), "bro" (BRO's residual LayerNorm blocks) and
"simbav2" (SimbaV2's hyperspherical blocks). Every body is a `layers.Body`: the fields
(hidden_sizes, out_dim, activation, layer_norm) and the call x [..., in] -> [..., out_dim].

For "bro" and "simbav2" the width is hidden_sizes[0] and the depth (residual blocks) is
len(hidden_sizes); the sizes must be equal (`learner_fields`). SimbaV2's linear layers
keep unit-norm weights: `project_unit_kernels`, a pure function over any parameters,
projects them back onto the sphere after every optimizer step (docs/semantics.md,
"Network bodies").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxsac.networks.layers import (
    ACTIVATIONS,
    KERNEL_INIT,
    MLP,
    NORM_EPS,
    Body,
    l2_normalize,
    orthogonal_kernel,
)

UNIT_KERNEL = "unit_kernel"
"""The parameter name of SimbaV2's unit-norm weights, which `project_unit_kernels` finds."""

SIMBAV2_SHIFT = 3.0
"""c_shift: the constant appended to the input before its normalization, so the input's
magnitude survives it (SimbaV2's default)."""

SIMBAV2_EXPANSION = 4
"""The inverted bottleneck of a SimbaV2 block: its inner layer is this many times wider."""


def project_unit_kernels(params: Any) -> Any:
    """`params` with every SimbaV2 weight matrix (a leaf named UNIT_KERNEL, [..., in, out],
    leading axes for stacked critics or modules) normalized along its input axis -2, so
    each output unit's weight vector has unit norm; every other leaf is returned as it is
    (the identity on networks without SimbaV2 layers)."""
    def project(path: Any, leaf: Any) -> Any:
        named = getattr(path[-1], "key", None) if path else None
        return l2_normalize(leaf, axis=-2) if named == UNIT_KERNEL else leaf
    return jax.tree_util.tree_map_with_path(project, params)


def unit_kernel_init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32
                      ) -> jax.Array:
    """An orthogonal draw [in, out] projected to unit-norm columns."""
    return l2_normalize(orthogonal_kernel(key, shape, dtype), axis=-2)


class BROBody(Body):
    """BRO (Nauman et al. 2024, "Bigger, Regularized, Optimistic"): a stem
    Dense-LayerNorm-activation of width w = hidden_sizes[0], then len(hidden_sizes)
    residual blocks x + LN(Dense(act(LN(Dense(x))))), then a linear readout to out_dim.
    `layer_norm` is not read (every layer is normalized). x [..., in] -> [..., out_dim]."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        width = self.hidden_sizes[0]
        x = act(nn.LayerNorm()(nn.Dense(width, kernel_init=KERNEL_INIT)(x)))
        for _ in self.hidden_sizes:
            branch = act(nn.LayerNorm()(nn.Dense(width, kernel_init=KERNEL_INIT)(x)))
            x = x + nn.LayerNorm()(nn.Dense(width, kernel_init=KERNEL_INIT)(branch))
        return nn.Dense(self.out_dim, kernel_init=KERNEL_INIT)(x)


class UnitDense(nn.Module):
    """x [..., in] -> x W [..., features], no bias, W [in, features] with unit-norm
    columns (the UNIT_KERNEL `project_unit_kernels` keeps on the sphere)."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param(UNIT_KERNEL, unit_kernel_init, (x.shape[-1], self.features))
        return x @ kernel


class Scaler(nn.Module):
    """x ⊙ s, a learnable scale s [dim] that starts at `initial`. It is stored as
    s / (initial/scale), starting at `scale`, so that an Adam step moves s by about
    initial/scale times the learning rate (SimbaV2's parameterization)."""

    dim: int
    initial: float
    scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        stored = self.param("scaler", nn.initializers.constant(self.scale), (self.dim,))
        return x * stored * (self.initial / self.scale)


class SimbaV2Body(Body):
    """SimbaV2 (Lee et al. 2025, "Hyperspherical Normalization for Scalable Deep RL").
    w = hidden_sizes[0], L = len(hidden_sizes) blocks, h always on the unit sphere:

        embed   h = norm(s_e ⊙ W_e norm([x; c_shift]))
        block   h̃ = norm(W_2 (act(s_1 ⊙ W_1 h) + ε)),  h ← norm(h + α ⊙ (h̃ − h))
        readout y = Dense(s_o ⊙ W_o h)             (unit_readout: W_y (s_o ⊙ W_o h) + b)

    norm: l2 normalization; W: UnitDense (no bias, unit-norm columns), W_1 4w wide;
    s: Scalers (initial √(2/w), √(2/(4w)) for s_1), α the LERP's learnable interpolation
    (initial 1/(L+1), stored at scale 1/√w). The readout Dense is an ordinary layer with
    a bias, so a scalar output (a Q-value, a quantile, a mean action) is unbounded.
    `unit_readout`: the last layer is SimbaV2's own, a UnitDense to out_dim (no scaler)
    plus a bias starting at 0, as in its categorical value head, where the outputs are
    logits. `layer_norm` is not read. x [..., in] -> [..., out_dim]."""

    unit_readout: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        width, depth = self.hidden_sizes[0], len(self.hidden_sizes)
        inner = SIMBAV2_EXPANSION * width
        s_init = (2.0 / width) ** 0.5
        shift = jnp.full(x.shape[:-1] + (1,), SIMBAV2_SHIFT, x.dtype)
        x = l2_normalize(jnp.concatenate([x, shift], axis=-1))
        h = l2_normalize(Scaler(width, s_init, s_init)(UnitDense(width)(x)))
        s_inner = s_init / SIMBAV2_EXPANSION ** 0.5
        for _ in range(depth):
            z = act(Scaler(inner, s_inner, s_inner)(UnitDense(inner)(h))) + NORM_EPS
            update = l2_normalize(UnitDense(width)(z))
            alpha = Scaler(width, 1.0 / (depth + 1), 1.0 / width ** 0.5)
            h = l2_normalize(h + alpha(update - h))
        readout = Scaler(width, s_init, s_init)(UnitDense(width)(h))
        if self.unit_readout:
            bias = self.param("readout_bias", nn.initializers.zeros, (self.out_dim,))
            return UnitDense(self.out_dim)(readout) + bias
        return nn.Dense(self.out_dim, kernel_init=KERNEL_INIT)(readout)


BODIES: dict[str, type[Body]] = {"mlp": MLP, "bro": BROBody, "simbav2": SimbaV2Body}
"""The network bodies by `SACConfig.network`."""
