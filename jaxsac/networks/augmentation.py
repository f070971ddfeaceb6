"""DrQ's image augmentation, inside the learner's jitted update (Kostrikov et al. 2020,
"Image Augmentation Is All You Need").

Each image of s and s′ (jaxsac.networks.conv.is_image: (H, W, C) uint8; stacked frames
shift together) is padded by `pad` pixels with copies of its edge pixels and cropped back
to H x W at an offset drawn for each sample: an independent random shift of up to ±pad
pixels. With `views` n > 1 each sample is seen n times, each view shifted on its own
(DrQ's K = M = n): the critics' target is the mean over the views of s′ and the losses
are averaged over the views of s. The learner takes an `Augmentation` (`augmentation`),
chosen once from the settings and the observation; without images it is `NONE`, which
leaves every batch and the run's bits as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxsac import checks
from jaxsac.networks.conv import holds_image, is_image
from jaxsac.observations import ObsSpec
from jaxsac.types import Batch

DEFAULT_PAD = 4
"""DrQ's shift for 84 x 84 images: ±4 pixels."""

AUGMENTATION_STREAM = 0x5D17
"""The learner's key is folded with this to draw the shifts, apart from its other draws."""


def shift_offsets(key: jax.Array, batch: int, pad: int) -> jax.Array:
    """The crop's top-left corner of each sample in the padded image: [batch, 2] int32
    (row, column), each uniform in [0, 2·pad]; pad is the unshifted image."""
    return jax.random.randint(key, (batch, 2), 0, 2 * pad + 1, jnp.int32)


def random_shift(images: jax.Array, key: jax.Array, pad: int) -> jax.Array:
    """images [B, H, W, C] -> [B, H, W, C]: each edge-padded by `pad` and cropped back at
    its own offset (`shift_offsets(key, B, pad)`)."""
    size = images.shape[1:]
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")

    def crop(image: jax.Array, corner: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice(image, (corner[0], corner[1], 0), size)

    return jax.vmap(crop)(padded, shift_offsets(key, images.shape[0], pad))


def shift_images(obs: Any, key: jax.Array, pad: int) -> Any:
    """Observations [B, ...] with every image shifted (`random_shift`), the i-th image
    entry in sorted key order with `fold_in(key, i)`; other entries as they were."""
    if not isinstance(obs, dict):
        return random_shift(obs, key, pad) if is_image(obs[0]) else obs
    images = [k for k in sorted(obs) if is_image(obs[k][0])]
    shifted = {k: random_shift(obs[k], jax.random.fold_in(key, i), pad)
               for i, k in enumerate(images)}
    return {**obs, **shifted}


def repeat(tree: Any, views: int) -> Any:
    """Every leaf [B, ...] -> [views·B, ...]: the batch `views` times, view-major."""
    return jax.tree.map(lambda x: jnp.concatenate([x] * views, axis=0), tree)


def view_mean(x: jax.Array, views: int) -> jax.Array:
    """[views·B, ...] (view-major) -> [B, ...]: each sample's mean over its views."""
    return jnp.mean(x.reshape(views, -1, *x.shape[1:]), axis=0)


class Augmentation(NamedTuple):
    """What the learner's loss does with a batch (B samples, n views of each):

    views(batch, key) -> Batch of n·B samples: obs and next_obs shifted (s and s′ with
        independent draws), the other fields repeated.
    target(y [n·B, ...]) -> [n·B, ...]: each sample's target averaged over its views.
    per_sample(td_error [n·B]) -> [B]: the mean over the views (the priorities).
    """

    views: Callable[[Batch, jax.Array], Batch]
    target: Callable[[jax.Array], jax.Array]
    per_sample: Callable[[jax.Array], jax.Array]


def _identity(x: Any, *args: Any) -> Any:
    return x


NONE = Augmentation(_identity, _identity, _identity)
"""No augmentation: the batch as it is."""


def drq(pad: int, views: int) -> Augmentation:
    """DrQ's random shift of ±`pad` pixels, `views` views of each sample."""

    def augmented(batch: Batch, key: jax.Array) -> Batch:
        obs_key, next_key = jax.random.split(jax.random.fold_in(key, AUGMENTATION_STREAM))
        many = repeat(batch, views)
        return many._replace(obs=shift_images(many.obs, obs_key, pad),
                             next_obs=shift_images(many.next_obs, next_key, pad))

    def target(y: jax.Array) -> jax.Array:
        return y if views == 1 else repeat(view_mean(y, views), views)

    def per_sample(td_error: jax.Array) -> jax.Array:
        return td_error if views == 1 else view_mean(td_error, views)

    return Augmentation(augmented, target, per_sample)


def augmentation(image_pad: int | None, views: int, spec: ObsSpec) -> Augmentation:
    """The augmentation of SACConfig's `image_pad` (None: DEFAULT_PAD when the
    observation `spec` holds an image, else 0: none) and `augmentation_samples` (views).
    A shift without an image, or views of an unshifted batch, is a ValueError naming the
    field."""
    has_image = holds_image(spec.tree())
    pad = (DEFAULT_PAD if has_image else 0) if image_pad is None else image_pad
    if pad and not has_image:
        checks.fail("SACConfig", "image_pad", image_pad, "0 or None for an observation "
                    f"without images ({spec.describe()}; an image is an entry of rank 3, "
                    "(H, W, C), and dtype uint8)")
    if views > 1 and not pad:
        checks.fail("SACConfig", "augmentation_samples", views, "1 without image "
                    f"augmentation (image_pad={image_pad} for {spec.describe()}): every "
                    "view would be the same")
    return drq(pad, views) if pad else NONE
