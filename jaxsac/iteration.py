"""The part of an iteration both loops share: after the env step, store the steps,
count the iteration and its finished episodes, then take the gradient steps due
(docs/semantics.md, "Training step").

The JAX loop (jaxsac.jax_loop) calls `store`, then `learn` or `skip_learning` under a
`lax.cond` on the iteration's index, once per iteration inside its scan; the gymnasium
loop (jaxsac.host_loop) calls `absorb` (the same, with a static phase) for every
iteration of a block of host steps inside one jitted call.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxsac.assembly import Assembly, TrainState, iteration_keys
from jaxsac.learner import LearnerState
from jaxsac.metrics import nan_learner_metrics
from jaxsac.replay import ReplayState
from jaxsac.schedule import Phase, gradient_schedule
from jaxsac.types import EpisodeInfo, Step


def gradient_steps(assembly: Assembly, learner_state: LearnerState, buffer_state: ReplayState,
                   obs_stats: Any, key: jax.Array, num_steps: int, returns: Any = None):
    """`num_steps` gradient steps, each on a fresh sample followed by the priority update.

    Learner metrics are {name: [] or [M] for M stacked modules}.

    obs_stats: the statistics the sampled batches are normalized with (learner
    connector); returns: the reward scaling's statistics the sampled rewards are divided
    by (`assembly.returns`; None without it). Returns (learner state, buffer state,
    learner metrics averaged over the steps).
    """

    def one(carry, step_key):
        lstate, bstate = carry
        sample_key, update_key = jax.random.split(step_key)
        batch = assembly.buffer.sample(bstate, sample_key)
        batch = assembly.env_to_module.normalize_batch(obs_stats, batch)
        if assembly.returns is not None:
            batch = assembly.returns.scale_batch(returns, batch)
        lstate, metrics, td_error = assembly.learner.update(lstate, batch, update_key)
        bstate = assembly.buffer.update_priorities(bstate, batch.indices, td_error)
        return (lstate, bstate), metrics

    keys = jax.random.split(key, num_steps)
    (learner_state, buffer_state), metrics = jax.lax.scan(one, (learner_state, buffer_state), keys)
    return learner_state, buffer_state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)


def learn_from(assembly: Assembly, state: TrainState, obs_stats: Any, key: jax.Array):
    """The gradient steps due after iteration `state.iteration - 1`'s add (see
    `schedule.gradient_schedule`): (learner state, buffer state, learner metrics, NaN
    for an iteration without gradient steps)."""
    per_iteration, every = gradient_schedule(assembly.schedule)

    def run(_):
        return gradient_steps(assembly, state.learner, state.buffer, obs_stats, key,
                              per_iteration, state.returns)

    if every == 1:
        return run(None)
    due = (state.iteration - 1) % every == 0
    skip = lambda _: (state.learner, state.buffer, nan_learner_metrics(state.learner.step.shape))
    return jax.lax.cond(due, run, skip, None)


def store(assembly: Assembly, state: TrainState, step: Step, episodes: EpisodeInfo
          ) -> TrainState:
    """Add the iteration's steps, count the iteration and its finished episodes.

    step: Step [E]; episodes: EpisodeInfo [E].
    """
    return state.replace(
        buffer=assembly.buffer.add(state.buffer, step),
        iteration=state.iteration + 1,
        episodes=state.episodes.record(episodes.done, episodes.episode_return,
                                       episodes.episode_length),
        returns=(state.returns if assembly.returns is None
                 else assembly.returns.update(state.returns, step)),
    )


def learn(assembly: Assembly, state: TrainState, obs_stats: Any):
    """The gradient steps due after `store` (none on iterations `gradient_schedule`
    skips): (state, learner metrics, NaN when no gradient step was taken)."""
    _, update_key = iteration_keys(state.key, state.iteration - 1)
    learner_state, buffer_state, metrics = learn_from(assembly, state, obs_stats, update_key)
    return state.replace(learner=learner_state, buffer=buffer_state), metrics


def skip_learning(state: TrainState):
    """`learn`'s result for an iteration without gradient steps (warm-up)."""
    return state, nan_learner_metrics(state.learner.step.shape)


def absorb(assembly: Assembly, state: TrainState, step: Step, episodes: EpisodeInfo,
           obs_stats: Any, phase: Phase):
    """Everything of an iteration after the env step: `store`, then `learn` (not in
    WARMUP).

    step: Step [E]; episodes: EpisodeInfo [E]. Returns (state, learner metrics, NaN when
    no gradient step was taken). Shared by the JAX path and the gymnasium loop.
    """
    state = store(assembly, state, step, episodes)
    if phase is Phase.WARMUP:
        return skip_learning(state)
    return learn(assembly, state, obs_stats)
