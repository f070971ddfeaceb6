"""Image observations on the networks' side: DrQ's random shift against NumPy's edge
padding and slicing, the conv encoder against a float64 NumPy convolution written as
loops, where each loss's gradient goes with and without the critics' encoder shared,
"auto" keeping "flat"'s bits on vector observations, a run on a uint8 camera that
restores, resumes and loads its policy, and the errors of settings that cannot hold.
The env (tests/support/camera_envs.py) is a small reaching task with a 12 x 12 camera."""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint
from jaxsac.learner import LossParams
from jaxsac.networks import augmentation as aug
from jaxsac.networks.conv import Conv, ConvEncoder, ImageEncoder, conv2d, conv_map_size
from jaxsac.observations import obs_spec
from jaxsac.types import Batch
from tests.support import camera_envs, numpy_networks, numpy_sac
from tests.support.helpers import leaves_equal

camera_envs.register()
SPEC = obs_spec(camera_envs.OBSERVATION_SPACE)
CONV = dict(conv_channels=(4, 4), conv_strides=(2, 1), encoder_features=8)
SMALL = dict(num_envs=2, hidden_sizes=(16,), batch_size=8, buffer_capacity=400,
             learning_starts=40, log_every=40, total_env_steps=80, eval_episodes=1, **CONV)


def _images(rng, shape):
    return rng.integers(0, 256, shape).astype(np.uint8)


def _batch(rng, size=8):
    def obs():
        return {"pixels": jnp.asarray(_images(rng, (size, 12, 12, 3))),
                "state": jnp.asarray(rng.normal(size=(size, 2)), jnp.float32)}
    return Batch(obs=obs(), action=jnp.asarray(rng.uniform(-1, 1, (size, 2)), jnp.float32),
                 reward=jnp.asarray(rng.normal(size=size), jnp.float32), next_obs=obs(),
                 discount=jnp.full((size,), 0.99, jnp.float32),
                 n_step=jnp.ones((size,), jnp.int32), weights=jnp.ones((size,), jnp.float32),
                 indices=jnp.arange(size, dtype=jnp.int32))


# --- the random shift ----------------------------------------------------------------


def test_the_random_shift_is_numpys_edge_padding_cropped_at_each_samples_offset():
    rng = np.random.default_rng(0)
    images = _images(rng, (6, 9, 7, 2))
    key, pad = jax.random.key(3), 3
    shifted = np.asarray(aug.random_shift(jnp.asarray(images), key, pad))
    offsets = np.asarray(aug.shift_offsets(key, 6, pad))
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    for b, (row, col) in enumerate(offsets):
        np.testing.assert_array_equal(shifted[b], padded[b, row:row + 9, col:col + 7])
    assert shifted.dtype == np.uint8
    # Each sample draws its own corner, uniform over the (2·pad + 1)² of them.
    corners = np.asarray(aug.shift_offsets(jax.random.key(4), 4_000, 2))
    counts = np.bincount(corners[:, 0] * 5 + corners[:, 1], minlength=25)
    assert counts.size == 25 and counts.min() > 100
    np.testing.assert_array_equal(aug.random_shift(jnp.asarray(images), key, 0), images)


def test_only_image_entries_shift_each_with_its_own_key():
    rng = np.random.default_rng(1)
    obs = {"a": jnp.asarray(_images(rng, (5, 8, 8, 3))),
           "b": jnp.asarray(_images(rng, (5, 8, 8, 1))),
           "depth": jnp.asarray(rng.normal(size=(5, 8, 8, 1)), jnp.float32),
           "state": jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)}
    key = jax.random.key(7)
    out = aug.shift_images(obs, key, 2)
    for i, name in enumerate(("a", "b")):
        np.testing.assert_array_equal(
            out[name], aug.random_shift(obs[name], jax.random.fold_in(key, i), 2))
    for name in ("depth", "state"):  # a float map is not an image
        np.testing.assert_array_equal(out[name], obs[name])
    assert not np.array_equal(out["a"], obs["a"])


# --- the conv encoder ----------------------------------------------------------------


def numpy_conv(x, kernel, bias, stride):
    """VALID cross-correlation, float64, by loops: x [B, H, W, C], kernel [kh, kw, C, O]."""
    kh, kw = kernel.shape[:2]
    rows, cols = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], rows, cols, kernel.shape[3]))
    for i in range(rows):
        for j in range(cols):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.einsum("bhwc,hwco->bo", patch, kernel)
    return out + bias


def numpy_conv_encoder(params, image, strides):
    f64 = numpy_networks.f64
    x = image.astype(np.float64) / 255.0
    for layer, stride in zip(numpy_networks.ordered(params, "Conv"), strides, strict=True):
        x = np.maximum(numpy_conv(x, f64(layer["kernel"]), f64(layer["bias"]), stride), 0.0)
    x = numpy_networks.dense(x.reshape(x.shape[0], -1), params["Dense_0"])
    return np.tanh(numpy_networks.layer_norm(x, params["LayerNorm_0"]))


def test_the_conv_encoder_is_a_float64_numpy_convolution():
    """Two images of their own sizes (each its own trunk) and a vector entry after them."""
    rng = np.random.default_rng(2)
    obs = {"front": _images(rng, (3, 11, 13, 3)), "side": _images(rng, (3, 11, 11, 2)),
           "state": rng.normal(size=(3, 4)).astype(np.float32)}
    encoder = ImageEncoder(("front", "side"), (4, 5, 3), (2, 1, 1), 6)
    params = encoder.init(jax.random.key(0), obs)["params"]
    # Biases and LayerNorm start at 0 and 1: move every parameter off its initial value.
    params = jax.tree.map(lambda p: np.asarray(p) + rng.normal(0, 0.1, p.shape).astype(
        np.float32), params)
    got = np.asarray(encoder.apply({"params": params}, obs))
    expected = np.concatenate([numpy_conv_encoder(params["conv_front"], obs["front"], (2, 1, 1)),
                               numpy_conv_encoder(params["conv_side"], obs["side"], (2, 1, 1)),
                               obs["state"].astype(np.float64)], axis=-1)
    assert got.shape == (3, 6 + 6 + 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # An image array observation is one image through one trunk.
    one = ImageEncoder(None, (4,), (2,), 5)
    params = one.init(jax.random.key(2), obs["front"])["params"]
    np.testing.assert_allclose(one.apply({"params": params}, obs["front"]),
                               numpy_conv_encoder(params["conv"], obs["front"], (2,)),
                               rtol=1e-5, atol=1e-5)


def numpy_conv_gradients(x, kernel, grad, stride):
    """(d x, d kernel) of sum(grad · numpy_conv(x, kernel, 0, stride)), float64, by loops
    over the output's pixels: each pixel's patch gets grad·kernelᵀ and gives patch·grad."""
    kh, kw = kernel.shape[:2]
    d_x, d_kernel = np.zeros(x.shape), np.zeros(kernel.shape)
    for i in range(grad.shape[1]):
        for j in range(grad.shape[2]):
            rows, cols = slice(i * stride, i * stride + kh), slice(j * stride, j * stride + kw)
            d_x[:, rows, cols, :] += np.einsum("bo,hwco->bhwc", grad[:, i, j], kernel)
            d_kernel += np.einsum("bhwc,bo->hwco", x[:, rows, cols, :], grad[:, i, j])
    return d_x, d_kernel


@pytest.mark.parametrize("size,kernel_size,stride", [
    ((9, 9), (3, 3), 1), ((12, 11), (3, 3), 2), ((10, 13), (3, 3), 3), ((8, 9), (2, 3), 2),
    ((13, 12), (3, 2), 4)])
def test_the_convolutions_gradient_is_a_float64_numpy_one(size, kernel_size, stride):
    """conv2d's own gradient (written as convolutions XLA runs fast) against loops, where
    a stride leaves the last rows or columns out of every patch or takes them all, and a
    stride longer than the kernel skips pixels between patches."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3, *size, 4)).astype(np.float32)
    kernel = rng.normal(size=(*kernel_size, 4, 5)).astype(np.float32)
    out, pullback = jax.vjp(lambda x, k: conv2d(x, k, stride), x, kernel)
    np.testing.assert_allclose(out, numpy_conv(x.astype(np.float64), kernel.astype(
        np.float64), 0.0, stride), rtol=1e-5, atol=1e-4)
    grad = rng.normal(size=out.shape).astype(np.float32)
    d_x, d_kernel = pullback(grad)
    expected_x, expected_kernel = numpy_conv_gradients(
        x.astype(np.float64), kernel.astype(np.float64), grad.astype(np.float64), stride)
    np.testing.assert_allclose(d_x, expected_x, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(d_kernel, expected_kernel, rtol=1e-5, atol=1e-3)


def test_the_conv_layer_is_flaxs_conv_in_parameters_and_output():
    """Same names, shapes and initial draw as flax.linen.Conv, the same output and
    gradients, and any leading batch axes."""
    import flax.linen as nn

    from jaxsac.networks.conv import CONV_INIT

    x = jnp.asarray(np.random.default_rng(12).normal(size=(2, 3, 10, 9, 4)), jnp.float32)
    ours, flax_conv = Conv(6, 2), nn.Conv(6, (3, 3), (2, 2), "VALID", kernel_init=CONV_INIT)
    params, flax_params = ours.init(jax.random.key(5), x), flax_conv.init(jax.random.key(5), x)
    assert leaves_equal(params, flax_params)
    np.testing.assert_array_equal(ours.apply(params, x), flax_conv.apply(params, x))
    grads = [jax.grad(lambda p, m=m: jnp.sum(jnp.sin(m.apply(p, x))))(params)
             for m in (ours, flax_conv)]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), *grads)


def test_conv_map_size_is_the_shape_flax_convolutions_give():
    rng = np.random.default_rng(3)
    for height, width, strides, kernels in (
            (11, 13, (2, 1, 1), None), (84, 84, (2, 1, 1, 1), None), (7, 5, (3,), None),
            (9, 9, (2, 2), None), (12, 12, (2, 1), None), (84, 84, (4, 2, 1), (8, 4, 3)),
            (20, 17, (3, 1), (5, 2))):
        image = _images(rng, (1, height, width, 1))
        encoder = ConvEncoder(tuple(1 for _ in strides), strides, 1, kernels)
        params = encoder.init(jax.random.key(0), image)["params"]
        got = conv_map_size(height, width, strides, kernels)
        assert params["Dense_0"]["kernel"].shape[0] == got[0] * got[1], (height, strides)
        for i, k in enumerate(kernels or (3,) * len(strides)):
            assert params[f"Conv_{i}"]["kernel"].shape[:2] == (k, k)
    assert conv_map_size(84, 84, (4, 2, 1), (8, 4, 3)) == (7, 7)  # the Nature DQN's map
    assert conv_map_size(9, 9, (2, 1, 1)) == (0, 0) and conv_map_size(2, 5, (1,)) == (0, 3)


def test_an_image_too_small_for_the_convolutions_is_refused_before_the_run():
    config = jaxsac.SACConfig(env_id=camera_envs.JAX_ID, **{**SMALL, **CONV},
                              ).replace(conv_channels=(4, 4, 4), conv_strides=(2, 2, 1))
    with pytest.raises(ValueError, match=r"SACConfig.conv_strides=\(2, 2, 1\) is invalid: "
                       r"must be strides whose unpadded convolutions of kernel sizes "
                       r"\(3, 3, 3\) leave at least one pixel of the entry 'pixels' image "
                       r"\(12, 12, 3\) \(they leave 0 x 0\)"):
        jaxsac.train(config, progress=False)
    with pytest.raises(ValueError, match=r"SACConfig.conv_kernel_sizes=\(8, 4\) is invalid: "
                       r"must be kernel sizes whose unpadded convolutions of strides \(4, 2\) "
                       r"leave at least one pixel of the entry 'pixels' image \(12, 12, 3\)"):
        jaxsac.train(config.replace(conv_channels=(4, 4), conv_strides=(4, 2),
                                    conv_kernel_sizes=(8, 4)), progress=False)


# --- which encoder, and who trains it ------------------------------------------------


def test_auto_is_flat_on_vectors_and_conv_on_the_entries_that_hold_an_image():
    """On Pendulum "auto" builds "flat"'s networks (the same modules, so the same
    parameters and updates); with an image, the network that reads it gets the conv
    encoder, one that reads only the state none (its flat features)."""
    config = jaxsac.SACConfig(hidden_sizes=(8,))
    actions = jaxsac.connectors.module_actions(1)
    flat, auto = (jaxsac.networks.policy_head(actions, config.replace(encoder=name), 3)
                  for name in ("flat", "auto"))
    assert auto == flat and auto.actor.encoder is None
    assert leaves_equal(auto.init(jax.random.key(0), 3), flat.init(jax.random.key(0), 3))

    learner = jaxsac.make_learner(jaxsac.SACConfig(actor_obs_keys=("state",), **SMALL),
                                  SPEC, 2)
    state = jax.eval_shape(learner.init, jax.random.key(0))
    assert sorted(state.actor_params["params"]) == ["MLP_0"]
    critic = state.critic_params["params"]["encoder"]
    assert critic["conv_pixels"]["Conv_0"]["kernel"].shape == (3, 3, 3, 4)
    assert critic["conv_pixels"]["Dense_0"]["kernel"].shape == (3 * 3 * 4, 8)
    # The critics read 8 image features, 2 state entries and the 2 actions.
    assert state.critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"].shape == (2, 12, 16)


@pytest.mark.parametrize("sharing", ["separate", "critic"])
def test_each_loss_trains_its_own_encoder_or_the_critics_loss_alone(sharing):
    config = jaxsac.SACConfig(encoder_sharing=sharing, augmentation_samples=2, **SMALL)
    learner = jaxsac.make_learner(config, SPEC, 2)
    state = jax.jit(learner.init)(jax.random.key(0))
    params = LossParams(state.actor_params, state.critic_params, state.log_alpha)
    batch, key = _batch(np.random.default_rng(4)), jax.random.key(5)

    @jax.jit
    def gradients(params):  # each loss's gradient
        return [jax.grad(lambda p, n=name: learner.loss(p, state.target_critic_params, batch,
                                                        key)[1][n])(params)
                for name in ("policy_loss", "qf_loss")]

    def nonzero(tree):
        return [bool(np.any(np.asarray(x) != 0)) for x in jax.tree.leaves(tree)]

    from_policy, from_q = gradients(params)
    actor_from_policy, actor_from_q = (g.actor_params["params"] for g in (from_policy, from_q))
    critic_from_policy, critic_from_q = (g.critic_params["params"]
                                         for g in (from_policy, from_q))
    # The actor's body learns from the actor loss alone, the critics' from theirs.
    assert all(nonzero(actor_from_policy["MLP_0"])) and not any(nonzero(actor_from_q))
    assert all(nonzero(critic_from_q["VmapMLP_0"])) and not any(nonzero(critic_from_policy))
    actor_from_policy, critic_from_q = actor_from_policy["encoder"], critic_from_q["encoder"]
    assert all(nonzero(critic_from_q))
    if sharing == "separate":
        assert all(nonzero(actor_from_policy))
    else:  # the actor's copy is read with the gradient stopped
        assert not any(nonzero(actor_from_policy))
        copy = state.actor_params["params"]["encoder"]["encoder"]
        assert leaves_equal(copy, state.critic_params["params"]["encoder"])
        new, _, td_error = jax.jit(learner.update)(state, batch, key)
        assert td_error.shape == (8,)
        assert leaves_equal(new.actor_params["params"]["encoder"]["encoder"],
                            new.critic_params["params"]["encoder"])
        assert not leaves_equal(new.critic_params["params"]["encoder"],
                                state.critic_params["params"]["encoder"])
        assert not leaves_equal(new.actor_params["params"]["MLP_0"],
                                state.actor_params["params"]["MLP_0"])


def test_drqs_views_average_the_target_over_s_prime_and_the_losses_over_s():
    """Two shifted views of each sample, against float64 NumPy (docs/semantics.md, "Image
    observations"): the shifts drawn from the documented keys, each view's target from
    its own view of s′ with the a′ noise of its row, the mean of a sample's targets fit
    by both views of s, the TD error of a sample the mean over its views. The actor reads
    the critics' features (encoder_sharing="critic")."""
    config = jaxsac.SACConfig(encoder_sharing="critic", augmentation_samples=2, image_pad=2,
                              **SMALL)
    learner = jaxsac.make_learner(config, SPEC, 2)
    state = jax.jit(learner.init)(jax.random.key(0))
    batch, key = _batch(np.random.default_rng(7), size=4), jax.random.key(8)
    params = LossParams(state.actor_params, state.critic_params, state.log_alpha)
    _, aux = jax.jit(learner.loss)(params, state.target_critic_params, batch, key)

    views, pad = 2, 2
    obs_key, next_key = jax.random.split(jax.random.fold_in(key, 0x5D17))
    target_key, policy_key = jax.random.split(key)

    def features(encoder, obs, shift_key):
        images = np.concatenate([np.asarray(obs["pixels"])] * views)
        corners = np.asarray(aug.shift_offsets(jax.random.fold_in(shift_key, 0), 8, pad))
        padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
        shifted = np.stack([padded[b, r:r + 12, c:c + 12] for b, (r, c) in enumerate(corners)])
        state_entry = np.concatenate([np.asarray(obs["state"], np.float64)] * views)
        image_features = numpy_conv_encoder(encoder["conv_pixels"], shifted, (2, 1))
        return np.concatenate([image_features, state_entry], -1)

    critic, target = state.critic_params["params"], state.target_critic_params["params"]
    repeated = jax.tree.map(lambda x: np.concatenate([np.asarray(x)] * views), batch)
    reference = numpy_sac.sac_losses(
        {"params": {"MLP_0": state.actor_params["params"]["MLP_0"]}}, state.critic_params,
        state.target_critic_params, state.log_alpha,
        repeated._replace(obs=features(critic["encoder"], batch.obs, obs_key),
                          next_obs=features(target["encoder"], batch.next_obs, next_key)),
        np.asarray(jax.random.normal(target_key, (8, 2))),
        np.asarray(jax.random.normal(policy_key, (8, 2))), target_entropy=-2.0)
    # sac_losses' target of each row reads that row's view of s′ (its next_obs).
    mean_target = reference["target"].reshape(views, 4).mean(0)
    error = reference["q"] - np.concatenate([mean_target] * views)
    np.testing.assert_allclose(aux["qf_loss"], np.mean(np.sum(0.5 * error**2, 0)),
                               rtol=1e-4)
    np.testing.assert_allclose(aux["td_error"],
                               np.abs(error).mean(0).reshape(views, 4).mean(0), rtol=1e-4)
    np.testing.assert_allclose(aux["policy_loss"], reference["policy_loss"], rtol=1e-4,
                               atol=1e-5)


# --- a run on a camera ---------------------------------------------------------------


def test_an_image_run_restores_resumes_and_loads_the_policy_it_trained(tmp_path):
    """The critics' encoder shared with the actor, two shifted views of each sample: the
    run resumed from its middle checkpoint ends with the same bits, and the loaded
    policy acts as the trained one does (with the critics' encoder)."""
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    config = jaxsac.SACConfig(env_id=camera_envs.JAX_ID, encoder_sharing="critic",
                              augmentation_samples=2, image_pad=2, normalize_obs=True,
                              checkpoint_every=40, checkpoint_dir=str(full_dir), **SMALL)
    full = jaxsac.train(config, progress=False)
    assert full.state.buffer.obs["pixels"].dtype == jnp.uint8
    restored, _ = checkpoint.restore(full_dir)
    assert leaves_equal(restored, full.state)
    shutil.copytree(full_dir / "40", resumed_dir / "40")
    resumed = jaxsac.train(config.replace(checkpoint_dir=str(resumed_dir), resume=True),
                           progress=False)
    assert leaves_equal(resumed.state, full.state)

    policy = jaxsac.load_policy(full_dir)
    learner = full.state.learner
    assert leaves_equal(policy.actor_params["params"]["encoder"]["encoder"],
                        learner.critic_params["params"]["encoder"])
    rng = np.random.default_rng(6)
    obs = {"pixels": _images(rng, (5, 12, 12, 3)),
           "state": rng.normal(size=(5, 2)).astype(np.float32)}
    in_memory = jaxsac.Policy.from_state(config, full.state)
    np.testing.assert_array_equal(policy(obs), in_memory(obs))
    stats = full.state.runner.obs_norm
    normalized = {"pixels": jnp.asarray(obs["pixels"]), "state": (
        (obs["state"] - stats.mean["state"]) / jnp.sqrt(stats.var["state"] + 1e-8))}
    head = jaxsac.networks.policy_head(jaxsac.connectors.module_actions(2), config, SPEC)
    np.testing.assert_allclose(policy(obs), jax.jit(head.mode)(learner.actor_params,
                                                               normalized),
                               rtol=1e-5, atol=1e-6)


# --- settings that cannot hold -------------------------------------------------------


def test_settings_that_cannot_hold_are_named():
    with pytest.raises(ValueError, match=r"SACConfig.image_pad=2 is invalid: must be 0 or "
                       r"None for an observation without images \(flat \[3\]"):
        jaxsac.make_learner(jaxsac.SACConfig(image_pad=2), 3, 1)
    with pytest.raises(ValueError, match=r"SACConfig.augmentation_samples=2 is invalid: must "
                       r"be 1 without image augmentation \(image_pad=None for flat \[3\]\)"):
        jaxsac.make_learner(jaxsac.SACConfig(augmentation_samples=2), 3, 1)
    with pytest.raises(ValueError, match=r"SACConfig.encoder='conv' is invalid: must be an "
                       r"encoder of the entries the network reads \(flat \[3\], "
                       r"actor_obs_keys=None\): \"conv\" encodes images"):
        jaxsac.make_learner(jaxsac.SACConfig(encoder="conv"), 3, 1)
    with pytest.raises(ValueError, match=r"SACConfig.encoder='conv' is invalid: .*\{'state': "
                       r"\[2\] float32\}, actor_obs_keys=\('state',\)"):
        jaxsac.make_learner(jaxsac.SACConfig(encoder="conv", actor_obs_keys=("state",)),
                            SPEC, 2)
    with pytest.raises(ValueError, match=r"SACConfig.encoder_sharing='critic' is invalid: "
                       r"must be 'separate' with the encoder 'auto' of these observations, "
                       r"which has no parameters"):
        jaxsac.make_learner(jaxsac.SACConfig(encoder_sharing="critic"), 3, 1)
    with pytest.raises(ValueError, match=r"SACConfig.encoder_sharing='critic' is invalid: "
                       r"must be 'separate' with actor_obs_keys=\('state',\) and "
                       r"critic_obs_keys=None"):
        jaxsac.SACConfig(encoder_sharing="critic", actor_obs_keys=("state",))
    for field, value, allowed in (
            ("image_pad", -1, r"an integer >= 0"),
            ("augmentation_samples", 0, r"an integer >= 1"),
            ("conv_channels", (32, 0), r"a non-empty tuple of positive integers"),
            ("conv_strides", (2, 1), r"one entry per convolution: 4 of them"),
            ("conv_kernel_sizes", (8, 4), r"one entry per convolution: 4 of them"),
            ("conv_kernel_sizes", (3, 0, 3, 3), r"a non-empty tuple of positive integers or None"),
            ("encoder_features", 0, r"an integer >= 1"),
            ("encoder_sharing", "actor", r"one of")):
        with pytest.raises(ValueError, match=rf"SACConfig.{field}={value!r} is invalid: must "
                           rf"be {allowed}".replace("(", r"\(").replace(")", r"\)")):
            jaxsac.SACConfig(**{field: value})
    with pytest.raises(ValueError, match=r"SACConfig.augmentation_samples=3 is invalid: must "
                       r"be 1 with image_pad=0"):
        jaxsac.SACConfig(image_pad=0, augmentation_samples=3)
