"""Encoders: what turns a module's observation into the features its actor and critics
read, chosen by name (`SACConfig.encoder`) at assembly.

The contract (`Encoder`): a flax module `encoder(obs) -> features [B, F]`, where obs is
an observation tree [B, ...] (jaxsac.observations: a flat array [B, obs_dim] for a Box,
a dict {key: [B, *shape]} for a Dict space, each entry in its own dtype),
differentiable in its parameters; the actor and the critic ensemble each own one
(`encoder` is a field of `Actor`, `CategoricalActor` and `QEnsemble`) and train it with
their own loss. "flat" is the first encoder: no parameters (`None`), the features are
the observation's leaves flattened to float32 and concatenated in sorted key order
(`flat_features`; a flat observation is its own features), which keeps the parameters
of every network as they were before encoders existed. "conv" (jaxsac.networks.conv)
gives each image entry (rank 3, (H, W, C), uint8) its own convolutional encoder and
concatenates the other entries' flat features after theirs. "auto", the default, is
"conv" for a network whose entries hold an image and "flat" otherwise, so a vector
observation keeps "flat"'s parameters and bits. A user's own flax module plugs
in by name; its factory receives the shapes of one observation (`ObsSpec.tree()`: a
`jax.ShapeDtypeStruct`, or a dict of them), those of the entries the network reads:

    jaxsac.networks.register_encoder("my_mlp", lambda obs_shapes: MyEncoder(64))
    config = jaxsac.SACConfig(encoder="my_mlp")

With `SACConfig.actor_obs_keys` or `critic_obs_keys` set (asymmetric actor-critic) a
network reads only those entries of a dict observation: its encoder is a `KeyView` of
them, around the registered one.

`SACConfig.encoder_sharing` says whether the actor owns its encoder ("separate") or
reads the critics' features with the gradient stopped ("critic", DrQ's), its copy of
the critics' encoder parameters written by the learner after every step
(`ENCODER_SHARING`).

The registry lives in this process: register before building a run or loading one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import flax.linen as nn
import jax

from jaxsac import checks
from jaxsac.config import SACConfig
from jaxsac.networks.conv import holds_image, image_encoder
from jaxsac.networks.registry import Registry
from jaxsac.networks.settings import NetworkSettings
from jaxsac.observations import ObsSpec, flat_features, obs_spec, select_keys


class Encoder(Protocol):
    """obs tree [B, ...] -> features [B, F] (a flax module: `init` / `apply` as usual)."""

    def __call__(self, obs: Any) -> jax.Array: ...


EncoderFactory = Callable[[Any], Encoder | None]
"""The shapes of one observation (a jax.ShapeDtypeStruct, or a dict of them) -> the
encoder of a network that reads such observations (None: the flat features)."""


def resolved_name(name: str, obs_shapes: Any) -> str:
    """The encoder `name` builds for one observation's shapes (None: not known): "auto"
    is "conv" where they hold an image, else "flat"; any other name is itself."""
    if name != "auto":
        return name
    return "conv" if obs_shapes is not None and holds_image(obs_shapes) else "flat"


def built_encoders(settings: Any, obs: ObsSpec) -> tuple[str, str]:
    """The encoders the actor and the critics of `settings` (a NetworkSettings or a
    SACConfig) are built with for observations `obs` ("auto" resolved for the entries
    each reads): two runs whose encoders are the same read their parameters alike."""
    return tuple(resolved_name(settings.encoder, obs.select(keys).tree()) for keys in (
        settings.actor_obs_keys, settings.critic_obs_keys))


ENCODERS = Registry("encoder", "register_encoder", {
    "flat": lambda obs_shapes, settings: None,
    "conv": image_encoder,
    "auto": lambda obs_shapes, settings: ENCODERS[resolved_name("auto", obs_shapes)](
        obs_shapes, settings)})
"""(one observation's shapes, NetworkSettings) -> encoder, by name; a registered factory
takes the shapes alone (`register_encoder` adapts it)."""


def encode(encoder: nn.Module | None, obs: Any) -> jax.Array:
    """A network's features: `encoder(obs)`, or the flat features without an encoder."""
    return flat_features(obs) if encoder is None else encoder(obs)


class KeyView(nn.Module):
    """Reads only the entries `keys` of a dict observation, through `encoder` (None: their
    flat features). No parameters of its own."""

    keys: tuple[str, ...]
    encoder: nn.Module | None = None

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        return encode(self.encoder, select_keys(obs, self.keys))


def register_encoder(name: str, factory: EncoderFactory) -> None:
    """Make `SACConfig(encoder=name)` build its networks with `factory(obs_shapes)`."""
    ENCODERS.add(name, lambda obs_shapes, settings: factory(obs_shapes), factory,
                 "observation shapes -> flax module")


def registered_encoders() -> list[str]:
    """The names `SACConfig.encoder` accepts in this process."""
    return ENCODERS.names()


def make_encoder(name: str, obs: ObsSpec | int | None, keys: tuple[str, ...] | None = None,
                 field: str = "obs_keys", settings: Any = None) -> Encoder | None:
    """The encoder registered as `name` for observations `obs` (an ObsSpec, an int d for
    flat observations [d], or None: not known, which only the built-in "flat" and "auto"
    encoders accept), reading only the entries `keys` of a dict observation when given
    (errors name the config's `field`). settings: a NetworkSettings (or a SACConfig),
    the built-in encoders' sizes; None: the defaults."""
    if name not in ENCODERS:
        ENCODERS.missing("SACConfig", "encoder", name)
    if obs is None and (name not in ("flat", "auto") or keys is not None):
        checks.fail("policy_head", "obs", obs,
                    f"the observation spec for the registered encoder {name!r}"
                    + (f" reading the keys {keys}" if keys is not None else ""))
    spec = None if obs is None else obs_spec(obs, "policy_head").select(keys, "SACConfig",
                                                                        field)
    shapes = None if spec is None else spec.tree()
    if name == "conv" and not holds_image(shapes):
        checks.fail("SACConfig", "encoder", name, "an encoder of the entries the network "
                    f"reads ({spec.describe()}, {field}={keys}): \"conv\" encodes images, "
                    "entries of rank 3 (H, W, C) and dtype uint8, and there are none; "
                    "\"flat\" or \"auto\" reads vectors")
    settings = NetworkSettings.of(SACConfig() if settings is None else settings)
    encoder = ENCODERS[name](shapes, settings)
    if encoder is not None and not isinstance(encoder, nn.Module):
        raise ValueError(f"the encoder factory registered as {name!r} returned "
                         f"{type(encoder).__name__}: must return a flax module or None")
    return encoder if keys is None else KeyView(tuple(keys), encoder)


class CriticFeatures(nn.Module):
    """The actor's encoder with encoder_sharing="critic": the critics' `encoder`, its
    features with the gradient stopped, so the actor's loss trains none of it. Its
    parameters (under "encoder") are a copy of the critics' encoder's, which the learner
    writes after every step (`share_critic_encoder`): the actor acts on its own
    parameters alone (collection, evaluation, `load_policy`)."""

    encoder: nn.Module

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        return jax.lax.stop_gradient(self.encoder(obs))


def share_critic_encoder(actor_params: Any, critic_params: Any) -> Any:
    """`actor_params` whose `CriticFeatures` parameters are those of the critics' encoder
    (both networks keep their encoder under "encoder", as the built-in ones do)."""
    if "encoder" not in actor_params["params"] or "encoder" not in critic_params["params"]:
        checks.fail("SACConfig", "encoder_sharing", "critic", "'separate' for an actor or "
                    "critics without parameters under 'encoder' (the built-in networks "
                    "keep their encoder there)")
    shared = {"encoder": critic_params["params"]["encoder"]}
    return {**actor_params, "params": {**actor_params["params"], "encoder": shared}}


class EncoderSharing(NamedTuple):
    """What SACConfig.encoder_sharing decides, at one place: the actor's encoder from its
    own and the critics' (`actor_encoder(own, critics')`), and the actor's parameters
    after each step and at init from both networks' (`sync(actor_params, critic_params)`)."""

    actor_encoder: Callable[[Any, Any], Any]
    sync: Callable[[Any, Any], Any]


ENCODER_SHARING = {
    "separate": EncoderSharing(lambda own, critics: own, lambda actor, critic: actor),
    "critic": EncoderSharing(lambda own, critics: CriticFeatures(critics),
                             share_critic_encoder),
}
