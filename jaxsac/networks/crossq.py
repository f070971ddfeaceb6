"""CrossQ (Bhatt et al., ICLR 2024), `SACConfig.critic="crossq"`: N critics with batch
renormalization and no target network.

Each critic is BRN(x) -> [Dense -> activation -> BRN] per hidden size -> Dense, x the
critic's input (concat(features, a) for Box actions, the features for Discrete ones)
and BRN batch renormalization (jaxsac.networks.batch_renorm). The TD target comes from
the online critics: (s, a) and (s', a' ~ π) go through them in one joint train-mode
pass over the 2B rows, so the batch statistics cover both distributions; the target
is the ensemble's, y = R + d·(min_i Q_i(s', a') − α log π(a'|s')), from the joint
pass's second half with its gradient stopped, and the loss and TD error are the
ensemble's on the first half. The running statistics (the "batch_stats" collection)
are the family's state: updated by that pass, read in eval mode by every other use
(the actor's loss). docs/semantics.md, "CrossQ".

Shapes: B batch, N critics, |A| action dimension (Box) or number of actions (Discrete).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxsac.networks.batch_renorm import BatchRenorm
from jaxsac.networks.critics import EnsembleCritic
from jaxsac.networks.encoders import encode
from jaxsac.networks.layers import ACTIVATIONS, KERNEL_INIT


class RenormMLP(nn.Module):
    """x [..., in] -> [..., out_dim]: BRN, then Dense -> activation -> BRN per hidden size,
    then a linear layer; `train` is the batch renormalizations' mode."""

    hidden_sizes: Sequence[int]
    out_dim: int
    activation: str = "relu"
    momentum: float = 0.99
    warmup_steps: int = 100_000
    train: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        x = BatchRenorm(self.momentum, self.warmup_steps)(x, self.train)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=KERNEL_INIT)(x))
            x = BatchRenorm(self.momentum, self.warmup_steps)(x, self.train)
        return nn.Dense(self.out_dim, kernel_init=KERNEL_INIT)(x)


class CrossQEnsemble(nn.Module):
    """N `RenormMLP` critics, each with its own parameters and statistics (leading axis
    N). Box actions (num_actions=0): (obs [B, ...] (a tree), action [B, |A|]) -> q [N, B];
    Discrete ones: obs -> q [N, B, |A|]. `encoder`: obs -> features the critics share."""

    num_q: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_actions: int = 0
    encoder: nn.Module | None = None
    momentum: float = 0.99
    warmup_steps: int = 100_000

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array | None = None,
                 train: bool = False) -> jax.Array:
        features = encode(self.encoder, obs)
        x = features if self.num_actions else jnp.concatenate([features, action], axis=-1)
        critics = nn.vmap(
            RenormMLP,
            variable_axes={"params": 0, "batch_stats": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_q,
        )(self.hidden_sizes, self.num_actions or 1, self.activation, self.momentum,
          self.warmup_steps, train)
        q = critics(x)
        return q if self.num_actions else q[..., 0]


def _joined(first: Any, second: Any) -> Any:
    """The rows of `first` then those of `second`, entry by entry for an observation tree
    (None for critics of s alone)."""
    if first is None:
        return None
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=0), first, second)


class CrossQCritic(EnsembleCritic):
    """The ensemble's value, target, loss and TD error on `CrossQEnsemble` critics, with
    the joint pass of the module docstring as `taken_and_next` and no target network."""

    target_network = False

    def init(self, key: jax.Array, obs: jax.Array, action: jax.Array | None = None) -> Any:
        """{"params": ..., "batch_stats": ...}: the parameters and the initial statistics
        (means 0, variances 1, no train-mode call yet)."""
        return self.network.init(key, obs, action)

    def apply(self, variables: Any, obs: jax.Array, action: jax.Array | None = None
              ) -> jax.Array:
        """Eval mode: normalized with the running statistics, which stay as they are."""
        return self.network.apply(variables, obs, action, train=False)

    def taken_and_next(self, variables: Any, target_variables: Any, obs: jax.Array,
                       action: jax.Array | None, next_obs: jax.Array,
                       next_action: jax.Array | None) -> tuple[jax.Array, jax.Array, Any]:
        """(out at (s, a) [N, B(, |A|)], out at (s', a'), the new {"batch_stats": ...})
        from one train-mode pass of the online critics over the 2B rows;
        `target_variables` is not read (there is no target network)."""
        del target_variables
        out, updates = self.network.apply(
            variables, _joined(obs, next_obs), _joined(action, next_action), train=True,
            mutable=["batch_stats"])
        taken, following = jnp.split(out, 2, axis=1)
        return taken, following, updates
