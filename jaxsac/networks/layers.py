"""The dense layers every network is built from: `MLP` (and `Body`, the fields every
network body has), its activations, its kernels' initial draw, and the QR-free
orthogonal draw (`orthogonal`) of the SimbaV2 bodies and the conv encoder."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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


class Body(nn.Module):
    """The fields every network body has (jaxsac.networks.bodies): a body is built as
    `Body(hidden_sizes, out_dim, activation, layer_norm)` and maps x [..., in] ->
    [..., out_dim]."""

    hidden_sizes: Sequence[int]
    out_dim: int
    activation: str = "relu"
    layer_norm: bool = False


class MLP(Body):
    """Dense layers with `activation` between them; the last layer is linear.
    `layer_norm`: a LayerNorm after each hidden activation (brax's order).

    x [..., in] -> [..., out_dim].
    """

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=KERNEL_INIT)(x))
            if self.layer_norm:
                x = nn.LayerNorm()(x)
        return nn.Dense(self.out_dim, kernel_init=KERNEL_INIT)(x)


NORM_EPS = 1e-8
"""The smallest norm divided by in an l2 normalization (a zero vector stays zero)."""


def l2_normalize(x: jax.Array, axis: int = -1) -> jax.Array:
    """x / max(‖x‖₂, NORM_EPS) along `axis` (the hyperspherical normalization)."""
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
    return x / jnp.maximum(norm, NORM_EPS)


def orthonormalized(z: jax.Array, passes: int = 2) -> jax.Array:
    """The Q of z = QR [..., m, k] (m >= k) with R's diagonal positive: the columns of z
    orthonormalized in order by modified Gram-Schmidt, `passes` times (a second pass
    restores the orthogonality float32 rounding loses on ill-conditioned draws).

    Plain array operations, not jnp.linalg.qr: on the CPU (jaxlib 0.10) LAPACK's batched
    QR splits its batch over XLA's intra-op thread pool and waits for the parts, so two
    such QRs run at once (the initialization of stacked critics or vmapped seeds) can
    take every thread of a small pool and wait forever (docs/semantics.md, "Network
    bodies")."""
    columns = z.shape[-1]

    def orthonormalize_column(j: jax.Array, q: jax.Array) -> jax.Array:
        v = l2_normalize(jax.lax.dynamic_index_in_dim(q, j, axis=-1, keepdims=False))
        later = jnp.arange(columns) > j
        overlap = jnp.where(later, jnp.einsum("...m,...mk->...k", v, q), 0.0)
        q = q - v[..., :, None] * overlap[..., None, :]
        return jax.lax.dynamic_update_index_in_dim(q, v, j, axis=-1)

    for _ in range(passes):
        z = jax.lax.fori_loop(0, columns, orthonormalize_column, z)
    return z


def orthogonal(scale: float = 1.0) -> Callable[..., jax.Array]:
    """The initializer flax.linen.initializers.orthogonal(scale) is, for kernels
    [..., in, out] read as matrices [prod(...)·in, out]: scale times a uniformly drawn
    orthogonal matrix (orthonormal columns, or rows when it is wide), the Q of a Gaussian
    [max, min] with R's diagonal positive, computed by `orthonormalized` instead of
    LAPACK's QR."""
    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        rows, cols = math.prod(shape[:-1]), shape[-1]
        q = orthonormalized(jax.random.normal(key, (max(rows, cols), min(rows, cols)), dtype))
        return scale * (q.T if rows < cols else q).reshape(shape)
    return init


orthogonal_kernel = orthogonal()
"""An orthogonal draw [in, out] (`orthogonal(1.0)`)."""
