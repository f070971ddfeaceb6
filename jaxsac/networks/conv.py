"""The encoder of image observations ("conv"): DrQ's and SAC-AE's convolutional encoder,
one per image entry, beside the other entries' flat features.

An image is an observation entry (or a whole array observation) of rank 3, (H, W, C),
and dtype uint8: channels last, stacked frames along C ((H, W, C·k) is one image of C·k
channels). Other entries, float images among them, are vectors to this encoder.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks
from jaxsac.networks.layers import orthogonal
from jaxsac.observations import flat_features

KERNEL_SIZE = 3
"""Each convolution's kernel is 3 x 3 by default (DrQ, SAC-AE and DrQ-v2 all use 3 x 3;
`SACConfig.conv_kernel_sizes` sets others, e.g. the Nature DQN's 8, 4, 3)."""

CONV_INIT = orthogonal(math.sqrt(2.0))
DENSE_INIT = orthogonal()
"""Orthogonal initial kernels, with the ReLU gain √2 for the convolutions, as DrQ-v2's
`weight_init` (drawn without LAPACK's QR: `layers.orthogonal`); biases start at zero."""


CANONICAL = ("NHWC", "HWIO", "NHWC")
"""The one layout of every convolution here, forward and backward: XLA's CPU backend
runs a convolution fast only in this form, and inside a loop (a training scan) it leaves
any other form (those of JAX's own convolution gradients) to a naive loop, 8-32x slower
(docs/performance.md, "Image updates on the CPU")."""


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv2d(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """x [B, H, W, C] * kernel [kh, kw, C, C'] -> [B, H', W', C']: an unpadded ("VALID")
    convolution of stride `stride`, H' = (H - kh) // stride + 1; the same operation as
    `flax.linen.Conv`'s, with a gradient written as convolutions in the CANONICAL form."""
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                        dimension_numbers=CANONICAL)


def _conv2d_forward(x: jax.Array, kernel: jax.Array, stride: int):
    return conv2d(x, kernel, stride), (x, kernel)


def _conv2d_backward(stride: int, residuals: tuple[jax.Array, jax.Array], grad: jax.Array
                     ) -> tuple[jax.Array, jax.Array]:
    """(d x [B, H, W, C], d kernel [kh, kw, C, C']) from grad [B, H', W', C'].

    d kernel: the images' channels as the batch and the batch as the channels,
    [C, H, W, B], convolved with grad as the kernel, [H', W', B, C'], dilated by the
    stride; the rows and columns a VALID stride skips at the end are cropped off.
    d x: grad dilated by the stride and padded by the kernel's size less one (and the
    skipped rows at the end), convolved with the kernel flipped in space and its
    channels swapped, [kh, kw, C', C]."""
    x, kernel = residuals
    kh, kw = kernel.shape[:2]
    d_kernel = jax.lax.conv_general_dilated(
        jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(grad, (1, 2, 0, 3)), (1, 1), "VALID",
        rhs_dilation=(stride, stride), dimension_numbers=CANONICAL)
    d_kernel = jnp.transpose(d_kernel[:, :kh, :kw, :], (1, 2, 0, 3))
    skipped = [(n - k) % stride for n, k in zip(x.shape[1:3], (kh, kw), strict=True)]
    padding = [(k - 1, k - 1 + r) for k, r in zip((kh, kw), skipped, strict=True)]
    flipped = jnp.transpose(jnp.flip(kernel, (0, 1)), (0, 1, 3, 2))
    d_x = jax.lax.conv_general_dilated(grad, flipped, (1, 1), padding,
                                       lhs_dilation=(stride, stride),
                                       dimension_numbers=CANONICAL)
    return d_x, d_kernel


conv2d.defvjp(_conv2d_forward, _conv2d_backward)


def convolve(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """`conv2d`'s operation, x [B, H, W, C] -> [B, H', W', C']: with conv2d's gradient on
    the CPU, JAX's own on other platforms (GPU and TPU convolutions take any layout, and
    conv2d's was measured on the CPU only), chosen when the program is lowered."""
    def plain(x: jax.Array, kernel: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                            dimension_numbers=CANONICAL)

    return jax.lax.platform_dependent(x, kernel, cpu=lambda x, k: conv2d(x, k, stride),
                                      default=plain)


class Conv(nn.Module):
    """One k x k unpadded convolution with a bias: [..., H, W, C] -> [..., H', W',
    features] (`convolve`), float32. Its parameters ("kernel" [k, k, C, features],
    "bias" [features]) and their initial draw are those of `flax.linen.Conv` under the
    same name, and so is its output. Reverse-mode gradients only (conv2d's custom VJP has
    no forward-mode rule; jaxsac takes none)."""

    features: int
    stride: int
    kernel_size: int = KERNEL_SIZE

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel_size
        kernel = self.param("kernel", CONV_INIT, (k, k, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        y = convolve(x.reshape(-1, *x.shape[-3:]), kernel, self.stride)
        return y.reshape(*x.shape[:-3], *y.shape[1:]) + bias


def is_image(shape: Any) -> bool:
    """Whether one entry's shape (a jax.ShapeDtypeStruct, or an array) is an image:
    rank 3, (H, W, C), uint8."""
    return len(shape.shape) == 3 and np.dtype(shape.dtype) == np.uint8


def holds_image(obs_shapes: Any) -> bool:
    """Whether one observation's shapes (a jax.ShapeDtypeStruct, or a dict of them) hold
    an image."""
    return any(is_image(leaf) for leaf in jax.tree.leaves(obs_shapes))


class ConvEncoder(nn.Module):
    """One image [..., H, W, C] uint8 -> features [..., features] in (-1, 1).

    x / 255 (in [0, 1], as DrQ and SAC-AE scale it), then one convolution for each
    entry of `channels` with the stride and kernel size (None: 3 x 3 each) at the same
    place of `strides` and `kernel_sizes`, no padding
    ("VALID", as PyTorch's default), each followed by ReLU; the last map flattened in
    (H', W', C') order, then Dense(features), LayerNorm and tanh. With the defaults an
    84 x 84 image gives a 35 x 35 x 32 map, DrQ's.
    """

    channels: Sequence[int] = (32, 32, 32, 32)
    strides: Sequence[int] = (2, 1, 1, 1)
    features: int = 50
    kernel_sizes: Sequence[int] | None = None

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:
        x = image.astype(jnp.float32) / 255.0
        layers = zip(self.channels, self.strides, kernel_sizes_of(self.kernel_sizes,
                                                                  self.channels), strict=True)
        for i, (width, stride, size) in enumerate(layers):
            x = nn.relu(Conv(width, stride, size, name=f"Conv_{i}")(x))
        x = x.reshape(*x.shape[:-3], -1)
        return jnp.tanh(nn.LayerNorm()(nn.Dense(self.features, kernel_init=DENSE_INIT)(x)))


class ImageEncoder(nn.Module):
    """The "conv" encoder: obs tree [B, ...] -> features [B, F].

    image_keys: the dict entries that are images, each through its own `ConvEncoder`
    (parameters under "conv_<key>"), their features in sorted key order; the other
    entries' flat features (float32, sorted key order) follow. None: the observation is
    one image array, through one ConvEncoder ("conv"). F = features · (number of images)
    + the other entries' sizes.
    """

    image_keys: tuple[str, ...] | None
    channels: Sequence[int] = (32, 32, 32, 32)
    strides: Sequence[int] = (2, 1, 1, 1)
    features: int = 50
    kernel_sizes: Sequence[int] | None = None

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        sizes = (self.channels, self.strides, self.features, self.kernel_sizes)
        if self.image_keys is None:
            return ConvEncoder(*sizes, name="conv")(obs)
        parts = [ConvEncoder(*sizes, name=f"conv_{key}")(obs[key]) for key in self.image_keys]
        vectors = {k: v for k, v in obs.items() if k not in self.image_keys}
        if vectors:
            parts.append(flat_features(vectors))
        return jnp.concatenate(parts, axis=-1)


def kernel_sizes_of(kernel_sizes: Sequence[int] | None, channels: Sequence[int]
                    ) -> tuple[int, ...]:
    """Each convolution's kernel size: `kernel_sizes`, or KERNEL_SIZE for each channel
    entry when None."""
    return tuple(kernel_sizes) if kernel_sizes is not None else (KERNEL_SIZE,) * len(channels)


def conv_map_size(height: int, width: int, strides: Sequence[int],
                  kernel_sizes: Sequence[int] | None = None) -> tuple[int, int]:
    """(H', W') of the last map of an H x W image after one unpadded k x k convolution
    per stride (k from `kernel_sizes`, None: 3 each): each maps n to (n - k) // stride
    + 1, and n < k to 0."""
    for stride, k in zip(strides, kernel_sizes_of(kernel_sizes, strides), strict=True):
        height, width = ((max(n - k, -stride) // stride + 1) for n in (height, width))
    return height, width


def check_image_fits(name: str, shape: Sequence[int], strides: Sequence[int],
                     kernel_sizes: Sequence[int] | None = None) -> None:
    """Raise the SACConfig error when an image (H, W, C) leaves no pixel after the
    convolutions: it names conv_kernel_sizes where they are set, else conv_strides."""
    height, width = conv_map_size(shape[0], shape[1], strides, kernel_sizes)
    if height < 1 or width < 1:
        kernels = kernel_sizes_of(kernel_sizes, strides)
        field, value, role = (("conv_strides", tuple(strides), f"strides whose unpadded "
                               f"convolutions of kernel sizes {kernels}")
                              if kernel_sizes is None else
                              ("conv_kernel_sizes", kernels, f"kernel sizes whose unpadded "
                               f"convolutions of strides {tuple(strides)}"))
        checks.fail("SACConfig", field, value,
                    f"{role} leave at least one pixel of the {name} image {tuple(shape)} "
                    f"(they leave {height} x {width}): fewer convolutions, smaller strides "
                    "or kernels")


def image_encoder(obs_shapes: Any, settings: Any) -> ImageEncoder:
    """The "conv" encoder for one observation's shapes (a jax.ShapeDtypeStruct, or a dict
    of them, holding an image) with the sizes of `settings` (conv_channels, conv_strides,
    conv_kernel_sizes, encoder_features)."""
    keys = None if not isinstance(obs_shapes, dict) else tuple(
        sorted(k for k, leaf in obs_shapes.items() if is_image(leaf)))
    images = ({"observation": obs_shapes} if keys is None
              else {f"entry {k!r}": obs_shapes[k] for k in keys})
    for name, image in images.items():
        check_image_fits(name, image.shape, settings.conv_strides, settings.conv_kernel_sizes)
    return ImageEncoder(keys, settings.conv_channels, settings.conv_strides,
                        settings.encoder_features, settings.conv_kernel_sizes)
