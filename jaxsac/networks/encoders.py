"""Encoders: what turns a module's observation into the features its actor and critics
read, chosen by name (`SACConfig.encoder`) at assembly.

The contract (`Encoder`): a flax module `encoder(obs [B, ...]) -> features [B, F]`,
differentiable in its parameters; the actor and the critic ensemble each own one
(`encoder` is a field of `Actor`, `CategoricalActor` and `QEnsemble`) and train it with
their own loss. "flat" is the first encoder: the flattened observation vector itself,
no parameters (`None`), which keeps the parameters of every network as they were
before encoders existed. A user's own flax module plugs in by name:

    jaxsac.networks.register_encoder("my_mlp", lambda obs_dim: MyEncoder(64))
    config = jaxsac.SACConfig(encoder="my_mlp")

The registry lives in this process: register before building a run or loading one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import flax.linen as nn
import jax

from jaxsac import checks
from jaxsac.networks.registry import Registry


class Encoder(Protocol):
    """obs [B, ...] -> features [B, F] (a flax module: `init` / `apply` as usual)."""

    def __call__(self, obs: jax.Array) -> jax.Array: ...


EncoderFactory = Callable[[int], Encoder | None]
"""obs_dim -> the encoder of a module whose observations have obs_dim entries (None:
the observation itself is the features)."""

ENCODERS = Registry("encoder", "register_encoder", {"flat": lambda obs_dim: None})


def register_encoder(name: str, factory: EncoderFactory) -> None:
    """Make `SACConfig(encoder=name)` build its networks with `factory(obs_dim)`."""
    ENCODERS.add(name, factory, factory, "obs_dim -> flax module")


def registered_encoders() -> list[str]:
    """The names `SACConfig.encoder` accepts in this process."""
    return ENCODERS.names()


def make_encoder(name: str, obs_dim: int | None) -> Encoder | None:
    """The encoder registered as `name` for observations of obs_dim entries (None: not
    known, which only the built-in "flat" encoder accepts)."""
    if name not in ENCODERS:
        ENCODERS.missing("SACConfig", "encoder", name)
    if name != "flat" and obs_dim is None:
        checks.fail("policy_head", "obs_dim", obs_dim,
                    f"the observation size for the registered encoder {name!r}")
    encoder = ENCODERS[name](obs_dim)
    if encoder is not None and not isinstance(encoder, nn.Module):
        raise ValueError(f"the encoder factory registered as {name!r} returned "
                         f"{type(encoder).__name__}: must return a flax module or None")
    return encoder
