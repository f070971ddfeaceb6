"""The episode buffer's checks of its settings and of the arrays its functions are given.

Each raises `ValueError` naming the argument (or the Step field), its value or shape, and
what is allowed. Shapes are static, so the checks of `init`, `add` and
`update_priorities` also run under `jit`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks
from jaxsac.replay.state import ReplayState
from jaxsac.types import Step

MAX_CAPACITY = 2**30


def check_settings(capacity, num_envs, batch_size, gamma, prioritized, alpha, beta, eps,
                   beta_final, beta_steps) -> None:
    """The arguments of `episode_buffer` (all but `n_step`, which `checks.check_n_step`
    reads)."""
    owner = "episode_buffer"
    checks.check_int(owner, "num_envs", num_envs, 1)
    if not checks.is_int(capacity) or not num_envs <= capacity <= MAX_CAPACITY:
        checks.fail(owner, "capacity", capacity,
                    f"an integer in [num_envs={num_envs}, {MAX_CAPACITY}]")
    if capacity % num_envs:
        checks.fail(owner, "capacity", capacity,
                    f"a multiple of num_envs={num_envs} (each env gets an equal ring)")
    checks.check_int(owner, "batch_size", batch_size, 1)
    if isinstance(gamma, (numbers.Number, bool)):  # a traced gamma is not checked
        checks.check_real(owner, "gamma", gamma, 0.0, 1.0)
    checks.check_bool(owner, "prioritized", prioritized)
    checks.check_real(owner, "alpha", alpha, 0.0, math.inf)
    checks.check_real(owner, "beta", beta, 0.0, 1.0)
    checks.check_real(owner, "eps", eps, 0.0, math.inf, open_low=True)
    if beta_final is not None:
        checks.check_real(owner, "beta_final", beta_final, 0.0, 1.0)
    checks.check_int(owner, "beta_steps", beta_steps, 0)


def check_frame_stack(frame_stack: Any, ring: int) -> None:
    """`episode_buffer`'s frame_stack: an integer in [1, ring] (each env's ring must
    hold a whole stack)."""
    if not checks.is_int(frame_stack) or not 1 <= frame_stack <= ring:
        checks.fail("episode_buffer", "frame_stack", frame_stack,
                    f"an integer in [1, capacity // num_envs = {ring}] (each env's ring "
                    "holds a whole frame stack)")


def check_example_step(example_step: Any, frame_stack: int = 1) -> None:
    """`init`'s example: one unbatched Step, reward and flags scalars, next_obs shaped
    like obs (the same tree of shapes), and an image leaf ([H, W, C] uint8) when
    frame_stack > 1."""
    for name in Step._fields:
        if not hasattr(example_step, name):
            raise ValueError(f"init: example_step has no field {name!r}; expected a Step")
    obs_shape = _shapes(example_step.obs)
    images = [x for x in jax.tree.leaves(example_step.obs)
              if jnp.ndim(x) == 3 and jnp.asarray(x).dtype == jnp.uint8]
    if frame_stack > 1 and not images:
        raise ValueError(f"init: frame_stack={frame_stack} is invalid for observations of "
                         f"shapes {obs_shape}: must be 1 when no observation leaf is an "
                         "image ([H, W, C] uint8) to stack")
    for name, shape in (("reward", ()), ("terminated", ()), ("truncated", ()),
                        ("next_obs", obs_shape)):
        got = _shapes(getattr(example_step, name))
        if got != shape:
            raise ValueError(
                f"init: example_step.{name} has shape {got}; expected {shape} "
                "(example_step is one unbatched Step; next_obs has the shape of obs)")


def _shapes(tree: Any, batch: tuple[int, ...] = (), drop: int = 0) -> Any:
    """The shape of an array, or {key: shape} of an observation tree: each without its
    first `drop` axes, after the leading `batch` axes."""
    if isinstance(tree, dict):
        return {k: _shapes(v, batch, drop) for k, v in tree.items()}
    return (*batch, *jnp.shape(tree)[drop:])


def check_step(state: ReplayState, step: Any, num_envs: int) -> None:
    """`add`'s step: every field with leading axis num_envs (E), then the shape the
    buffer stores; `failed`, when present, [E]."""
    rows = (num_envs,)
    obs_shapes = _shapes(state.obs, rows, drop=1)
    expected = {"obs": obs_shapes, "action": (*rows, *state.action.shape[1:]),
                "reward": rows, "terminated": rows, "truncated": rows, "next_obs": obs_shapes}
    for name, want in expected.items():
        if not hasattr(step, name):
            raise ValueError(f"add: step has no field {name!r}; expected a Step")
        got = _shapes(getattr(step, name))
        if got != want:
            raise ValueError(
                f"add: step.{name} has shape {got}; expected {want} "
                f"(leading axis num_envs={num_envs}, then the shape from init's example_step)")
    failed = getattr(step, "failed", None)
    if failed is not None and tuple(jnp.shape(failed)) != (num_envs,):
        raise ValueError(f"add: step.failed has shape {tuple(jnp.shape(failed))}; expected "
                         f"({num_envs},) or None")


def check_priority_args(indices: Any, td_error: Any, capacity: int) -> None:
    """`update_priorities`' indices [B] and td_error [B]: their shapes always; the
    indices' range when they are concrete (outside jit; under jit out-of-range indices
    are ignored)."""
    idx_shape, td_shape = jnp.shape(indices), jnp.shape(td_error)
    if len(idx_shape) != 1:
        raise ValueError(f"update_priorities: indices has shape {idx_shape}; expected [batch]")
    if td_shape != idx_shape:
        raise ValueError(f"update_priorities: td_error has shape {td_shape}; expected "
                         f"{idx_shape} (one per index)")
    if isinstance(indices, jax.core.Tracer):
        return
    values = np.asarray(indices)
    bad = values[(values < 0) | (values >= capacity)]
    if bad.size:
        raise ValueError(f"update_priorities: indices={bad[:5].tolist()} "
                         f"{'(and more) ' if bad.size > 5 else ''}are invalid: must be rows "
                         f"in [0, {capacity}) (Batch.indices)")
