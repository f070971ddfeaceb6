"""The checks across SACConfig's learner and networks fields (`check_learner_fields`,
called by SACConfig's validation): the encoder and critic names, the temperature's and
policy's settings, the network sizes, the conv encoder's sizes, encoder sharing and
image augmentation, each built-in critic family's own settings, and the observation
entries the actor and critics read.

A built-in critic family reads its own settings (CRITIC_FAMILY_FIELDS); with one of them
chosen, the settings only other families read must keep their defaults, so a value set
for a family that does not run is an error, not silently ignored. A registered family
may read any field, so a name outside the table is not checked here. The network bodies
("bro", "simbav2") take equal hidden sizes and no critic LayerNorm; CrossQ, which has no
target network, keeps the target-network settings at their defaults.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxsac import checks

OWNER = "SACConfig"

CRITIC_FAMILY_FIELDS = {
    "ensemble": ("critic_loss",),
    "tqc": ("num_quantiles", "quantiles_to_drop_per_net"),
    "categorical": ("num_atoms", "v_min", "v_max", "categorical_target", "hl_gauss_sigma"),
    "crossq": ("critic_loss", "batch_norm_momentum", "batch_renorm_warmup"),
}
"""The SACConfig fields that only some built-in critic families read, by family."""

TARGET_NETWORK_FIELDS = ("tau", "target_network_update_freq")
"""The settings of the target critics, which critic="crossq" has none of."""


def check_learner_fields(c: Any) -> None:
    """Raise the ValueError of jaxsac.checks for the first learner or networks setting of
    the SACConfig `c` that its other fields rule out (single values are checked by the
    fields' own checks first)."""
    for name in ("encoder", "critic"):
        if not isinstance(getattr(c, name), str) or not getattr(c, name):
            checks.fail(OWNER, name, getattr(c, name), "a non-empty registered name")
    if c.grad_clip is not None:
        checks.check_real(OWNER, "grad_clip", c.grad_clip, 0.0, math.inf, open_low=True)
    if not c.adam_b1 < 1.0:
        checks.fail(OWNER, "adam_b1", c.adam_b1, "a number in [0, 1) (at 1 the moving "
                    "average of the gradient stays 0 and its bias correction divides by 0)")
    _check_temperature(c)
    if c.log_std_bounds is not None and not (
            isinstance(c.log_std_bounds, tuple) and len(c.log_std_bounds) == 2
            and all(checks.is_real(b) for b in c.log_std_bounds)
            and c.log_std_bounds[0] < c.log_std_bounds[1]):
        checks.fail(OWNER, "log_std_bounds", c.log_std_bounds,
                    "None or a pair (min, max) of finite numbers with min < max")
    if (not isinstance(c.hidden_sizes, tuple) or not c.hidden_sizes
            or not all(checks.is_int(h) and h >= 1 for h in c.hidden_sizes)):
        checks.fail(OWNER, "hidden_sizes", c.hidden_sizes,
                    "a non-empty tuple of positive integers")
    _check_network_body(c)
    _check_image_fields(c)
    _check_critic_family(c)
    for name in ("actor_obs_keys", "critic_obs_keys"):
        keys = getattr(c, name)
        if keys is not None and c.obs_keys is not None and not set(keys) <= set(c.obs_keys):
            checks.fail(OWNER, name, keys, f"None or keys among obs_keys={c.obs_keys} (the "
                        "entries the run keeps)")


def _check_image_fields(c: Any) -> None:
    """The conv encoder's sizes, encoder sharing and DrQ's augmentation (whether the
    env's observation holds an image is checked where the learner is built)."""
    for name in ("conv_channels", "conv_strides", "conv_kernel_sizes"):
        sizes = getattr(c, name)
        if name == "conv_kernel_sizes" and sizes is None:
            continue
        if (not isinstance(sizes, tuple) or not sizes
                or not all(checks.is_int(h) and h >= 1 for h in sizes)):
            checks.fail(OWNER, name, sizes, "a non-empty tuple of positive integers"
                        + (" or None" if name == "conv_kernel_sizes" else ""))
        if name != "conv_channels" and len(sizes) != len(c.conv_channels):
            checks.fail(OWNER, name, sizes, f"one entry per convolution: "
                        f"{len(c.conv_channels)} of them, as conv_channels={c.conv_channels}")
    if c.encoder_sharing == "critic" and c.actor_obs_keys != c.critic_obs_keys:
        checks.fail(OWNER, "encoder_sharing", c.encoder_sharing,
                    f"'separate' with actor_obs_keys={c.actor_obs_keys} and critic_obs_keys="
                    f"{c.critic_obs_keys} (the actor can read the critics' features only "
                    "where it reads their entries)")
    if c.image_pad is not None:
        checks.check_int(OWNER, "image_pad", c.image_pad, 0)
    if c.augmentation_samples > 1 and c.image_pad == 0:
        checks.fail(OWNER, "augmentation_samples", c.augmentation_samples,
                    "1 with image_pad=0 (without the random shift every view is the same)")


def _check_network_body(c: Any) -> None:
    if c.network == "mlp":
        return
    if len(set(c.hidden_sizes)) != 1:
        checks.fail(OWNER, "hidden_sizes", c.hidden_sizes,
                    f"equal sizes (width,) * depth with network={c.network!r} (each entry "
                    "is one residual block of the one width)")
    if c.critic_layer_norm:
        checks.fail(OWNER, "critic_layer_norm", c.critic_layer_norm,
                    f"False with network={c.network!r} (its blocks normalize already)")


def _check_temperature(c: Any) -> None:
    if not (c.target_entropy == "auto" or checks.is_real(c.target_entropy)):
        checks.fail(OWNER, "target_entropy", c.target_entropy, '"auto" or a finite number')
    for name in ("target_entropy_scale", "target_entropy_ratio"):
        if getattr(c, name) is not None and c.target_entropy != "auto":
            checks.fail(OWNER, name, getattr(c, name),
                        f"None with an explicit target_entropy={c.target_entropy!r} (it "
                        'scales only target_entropy="auto")')
    scale = c.target_entropy_scale
    if scale is not None and (not checks.is_real(scale) or not 0.0 < scale < 1.0):
        checks.fail(OWNER, "target_entropy_scale", scale, "None or a number in (0, 1) "
                    "(a fraction of the largest entropy, log|A|)")
    ratio = c.target_entropy_ratio
    if ratio is not None and (not checks.is_real(ratio) or not ratio > -math.log(2.0)):
        checks.fail(OWNER, "target_entropy_ratio", ratio, "None or a finite number above "
                    f"-log 2 = {-math.log(2.0):.6g} (the target entropy -ratio·|A| must "
                    "stay below the largest a squashed policy has, |A| log 2)")


def _check_critic_family(c: Any) -> None:
    if c.actor_batch_renorm and c.critic != "crossq":
        checks.fail(OWNER, "actor_batch_renorm", c.actor_batch_renorm,
                    f"False with critic={c.critic!r}: the batch-renormalized actor is "
                    "CrossQ's (critic='crossq'), whose batch_norm_momentum and "
                    "batch_renorm_warmup it shares")
    if c.critic not in CRITIC_FAMILY_FIELDS:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(c)}
    for family, names in CRITIC_FAMILY_FIELDS.items():
        for name in names:
            if (name not in CRITIC_FAMILY_FIELDS[c.critic]
                    and getattr(c, name) != defaults[name]):
                checks.fail(OWNER, name, getattr(c, name),
                            f"{defaults[name]!r} (the default) with critic={c.critic!r}: "
                            f"it is a setting of critic={family!r}")
    if c.critic == "tqc" and c.quantiles_to_drop_per_net >= c.num_quantiles:
        checks.fail(OWNER, "quantiles_to_drop_per_net", c.quantiles_to_drop_per_net,
                    f"below num_quantiles={c.num_quantiles} (dropping every critic's "
                    "quantiles would leave the target no atom)")
    if c.critic == "categorical":
        _check_support(c, defaults)
    if c.critic == "crossq":
        _check_crossq(c, defaults)


def _check_crossq(c: Any, defaults: dict[str, Any]) -> None:
    for name in TARGET_NETWORK_FIELDS:
        if getattr(c, name) != defaults[name]:
            checks.fail(OWNER, name, getattr(c, name),
                        f"{defaults[name]!r} (the default) with critic='crossq': it sets the "
                        "target critics, and CrossQ has none (its target comes from the "
                        "online critics)")
    for name, allowed in (("network", "mlp"), ("critic_layer_norm", False)):
        if getattr(c, name) != allowed:
            checks.fail(OWNER, name, getattr(c, name),
                        f"{allowed!r} with critic='crossq' (its critics are MLPs normalized "
                        "by batch renormalization)")
    if not c.batch_norm_momentum < 1.0:
        checks.fail(OWNER, "batch_norm_momentum", c.batch_norm_momentum,
                    "a number in [0, 1) (at 1 the running statistics never move)")


def _check_support(c: Any, defaults: dict[str, Any]) -> None:
    for name in ("v_min", "v_max"):
        if not checks.is_real(getattr(c, name)):
            checks.fail(OWNER, name, getattr(c, name), 'a finite number with critic='
                        '"categorical": the fixed support [v_min, v_max] must be set to '
                        "cover the task's returns")
    if not c.v_min < c.v_max:
        checks.fail(OWNER, "v_max", c.v_max, f"above v_min={c.v_min} (the support "
                    "[v_min, v_max] of the categorical critic)")
    if c.categorical_target != "hl_gauss" and c.hl_gauss_sigma != defaults["hl_gauss_sigma"]:
        checks.fail(OWNER, "hl_gauss_sigma", c.hl_gauss_sigma,
                    f"{defaults['hl_gauss_sigma']!r} (the default) with categorical_target="
                    f"{c.categorical_target!r}: it is a setting of the HL-Gauss target")
