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
of every network as they were before encoders existed. A user's own flax module plugs
in by name; its factory receives the shapes of one observation (`ObsSpec.tree()`: a
`jax.ShapeDtypeStruct`, or a dict of them), those of the entries the network reads:

    jaxsac.networks.register_encoder("my_mlp", lambda obs_shapes: MyEncoder(64))
    config = jaxsac.SACConfig(encoder="my_mlp")

With `SACConfig.actor_obs_keys` or `critic_obs_keys` set (asymmetric actor-critic) a
network reads only those entries of a dict observation: its encoder is a `KeyView` of
them, around the registered one.

The registry lives in this process: register before building a run or loading one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import flax.linen as nn
import jax

from jaxsac import checks
from jaxsac.networks.registry import Registry
from jaxsac.observations import ObsSpec, flat_features, obs_spec, select_keys


class Encoder(Protocol):
    """obs tree [B, ...] -> features [B, F] (a flax module: `init` / `apply` as usual)."""

    def __call__(self, obs: Any) -> jax.Array: ...


EncoderFactory = Callable[[Any], Encoder | None]
"""The shapes of one observation (a jax.ShapeDtypeStruct, or a dict of them) -> the
encoder of a network that reads such observations (None: the flat features)."""

ENCODERS = Registry("encoder", "register_encoder", {"flat": lambda obs_shapes: None})


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
    ENCODERS.add(name, factory, factory, "observation shapes -> flax module")


def registered_encoders() -> list[str]:
    """The names `SACConfig.encoder` accepts in this process."""
    return ENCODERS.names()


def make_encoder(name: str, obs: ObsSpec | int | None, keys: tuple[str, ...] | None = None,
                 field: str = "obs_keys") -> Encoder | None:
    """The encoder registered as `name` for observations `obs` (an ObsSpec, an int d for
    flat observations [d], or None: not known, which only the built-in "flat" encoder
    accepts), reading only the entries `keys` of a dict observation when given (errors
    name the config's `field`)."""
    if name not in ENCODERS:
        ENCODERS.missing("SACConfig", "encoder", name)
    if obs is None and (name != "flat" or keys is not None):
        checks.fail("policy_head", "obs", obs,
                    f"the observation spec for the registered encoder {name!r}"
                    + (f" reading the keys {keys}" if keys is not None else ""))
    spec = None if obs is None else obs_spec(obs, "policy_head").select(keys, "SACConfig",
                                                                        field)
    encoder = ENCODERS[name](None if spec is None else spec.tree())
    if encoder is not None and not isinstance(encoder, nn.Module):
        raise ValueError(f"the encoder factory registered as {name!r} returned "
                         f"{type(encoder).__name__}: must return a flax module or None")
    return encoder if keys is None else KeyView(tuple(keys), encoder)
