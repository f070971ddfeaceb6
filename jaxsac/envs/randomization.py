"""Domain randomization of a MuJoCo Playground task: each env steps its own MJX model,
drawn by the task's own randomizer (`mujoco_playground.registry.get_domain_randomizer`),
as Playground's training does.

    env = jaxsac.envs.make("playground/T1JoystickFlatTerrain", domain_randomization=True)
    config = jaxsac.SACConfig(env_id="playground/T1JoystickFlatTerrain",
                              domain_randomization=True, ...)

Playground's training (brax's `randomization_fn`, `BraxDomainRandomizationVmapWrapper`)
draws one model per env with `randomizer(model, rng=keys [E])`, which returns the
batched model and its `in_axes` (0 on the leaves it draws: friction, masses, gains,
...), and steps env e with model e for the whole run. `DomainRandomized` does the same
as a JaxEnv: an env's `reset(key)` draws its model from `key` (the randomizer with one
key), its state carries the drawn leaves, its `step` runs the task with them, and the
autoreset's `reset_episode` starts a new episode with the same model. So the models are
reproducible from the run's seed, saved with the runner state in checkpoints, and
evaluation episodes each draw their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
from flax import struct

from jaxsac.envs.core import TimeLimit, Wrapper

Randomizer = Callable[..., tuple[Any, Any]]
"""randomizer(mjx_model, rng=keys [E]) -> (model with [E, ...] drawn leaves, in_axes)."""


def _is_none(x: Any) -> bool:
    return x is None


def drawn_positions(in_axes: Any) -> tuple[int, ...]:
    """Positions, among the model's leaves flattened with None fields kept, of the leaves
    a randomizer draws (in_axes 0; None for the leaves it shares)."""
    axes = jax.tree.leaves(in_axes, is_leaf=_is_none)
    if any(axis not in (0, None) for axis in axes):
        raise ValueError(f"a domain randomizer's in_axes must be 0 or None, got {set(axes)}")
    return tuple(i for i, axis in enumerate(axes) if axis == 0)


def with_leaves(model: Any, positions: tuple[int, ...], leaves: tuple[Any, ...]) -> Any:
    """`model` with its leaves at `positions` (see `drawn_positions`) replaced by `leaves`."""
    flat, treedef = jax.tree.flatten(model, is_leaf=_is_none)
    for position, leaf in zip(positions, leaves, strict=True):
        flat[position] = leaf
    return jax.tree.unflatten(treedef, flat)


def _in_axes(randomizer: Randomizer, model: Any) -> Any:
    """The randomizer's in_axes for `model` (Python values: traced abstractly, nothing
    drawn)."""
    in_axes = []

    def draw(key: jax.Array) -> Any:
        batched, axes = randomizer(model, rng=key[None])
        in_axes.append(axes)
        return batched

    jax.eval_shape(draw, jax.random.key(0))
    return in_axes[0]


@struct.dataclass
class RandomizedState:
    """model: the env's drawn model leaves (`DomainRandomized.positions`' order, each
    with the shape of the model's own leaf); env_state: the wrapped env's state."""

    model: tuple[jax.Array, ...]
    env_state: Any


class DomainRandomized(Wrapper):
    """A time-limited Playground task (TimeLimit(PlaygroundEnv)) whose every env steps
    its own model, drawn by `randomizer` when the env is first reset and kept across its
    episodes (`reset_episode`). Observations, actions and ends are the wrapped env's."""

    def __init__(self, env: TimeLimit, randomizer: Randomizer):
        super().__init__(env)
        self.randomizer = randomizer
        self.max_episode_steps = env.max_episode_steps
        self.task = env.unwrapped.env  # Playground's MjxEnv, whose model is swapped
        self.base_model = self.task.mjx_model
        self.positions = drawn_positions(_in_axes(randomizer, self.base_model))

    def draw_model(self, key: jax.Array) -> tuple[jax.Array, ...]:
        """One env's drawn leaves: the randomizer's model for the keys [key], unbatched."""
        batched, _ = self.randomizer(self.base_model, rng=key[None])
        flat = jax.tree.leaves(batched, is_leaf=_is_none)
        return tuple(flat[position][0] for position in self.positions)

    @contextlib.contextmanager
    def _model(self, leaves: tuple[jax.Array, ...]) -> Iterator[None]:
        """The task steps the model with `leaves` while tracing inside (brax's wrapper
        swaps the task's model the same way)."""
        self.task._mjx_model = with_leaves(self.base_model, self.positions, leaves)
        try:
            yield
        finally:
            self.task._mjx_model = self.base_model

    def reset(self, key: jax.Array) -> tuple[RandomizedState, jax.Array]:
        model_key, reset_key = jax.random.split(key)
        model = self.draw_model(model_key)
        with self._model(model):
            env_state, obs = self.env.reset(reset_key)
        return RandomizedState(model, env_state), obs

    def reset_episode(self, state: RandomizedState, key: jax.Array
                      ) -> tuple[RandomizedState, jax.Array]:
        """A new episode of the same env: its model kept, the task reset with `key`."""
        with self._model(state.model):
            env_state, obs = self.env.reset(key)
        return RandomizedState(state.model, env_state), obs

    def step(self, state: RandomizedState, action: jax.Array, key: jax.Array):
        with self._model(state.model):
            env_state, obs, reward, terminated, truncated = self.env.step(
                state.env_state, action, key)
        return RandomizedState(state.model, env_state), obs, reward, terminated, truncated

    def __repr__(self) -> str:
        return f"DomainRandomized({self.env!r})"
