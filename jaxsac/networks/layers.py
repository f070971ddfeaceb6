"""The dense layers every network is built from: `MLP`, its activations and its kernels'
initial draw."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax

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
