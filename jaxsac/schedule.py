"""The static schedule of a run: phases, log periods and gradient steps per iteration.

An *iteration* steps every env once. The first ceil(learning_starts / num_envs)
iterations act at random (WARMUP); the last of them, once learning_starts steps are
stored, also takes the first gradient steps (FIRST_UPDATE); every later iteration acts
with the policy and learns (LEARN). Iterations are grouped into *log periods* of
log_every env steps. All of it is Python arithmetic on the config, fixed at trace time.
"""

from __future__ import annotations

import enum

from jaxsac.config import SACConfig


class Phase(enum.Enum):
    """What an iteration does. The gymnasium loop compiles a block per phase; the JAX
    loop branches on the iteration's index inside one program (jaxsac.jax_loop)."""

    WARMUP = "warmup"  # random actions, no gradient steps
    FIRST_UPDATE = "first_update"  # random actions; learning_starts now stored: update
    LEARN = "learn"  # policy actions and gradient steps


def warmup_iterations(config: SACConfig) -> int:
    """Iterations with random actions: ceil(learning_starts / num_envs)."""
    return -(-config.learning_starts // config.num_envs)


def iterations_per_period(config: SACConfig) -> int:
    """Iterations of one log period: log_every / num_envs."""
    return config.log_every // config.num_envs


def num_periods(config: SACConfig) -> int:
    """Log periods of the whole run: total_env_steps / log_every."""
    return config.total_env_steps // config.log_every


def gradient_schedule(config: SACConfig) -> tuple[int, int]:
    """(gradient steps per update iteration, iterations between update iterations).

    round(utd_ratio * num_envs) per iteration (Python's round, halves to even) when that
    is at least one, else one every round(1 / (utd_ratio * num_envs)) iterations.
    """
    per_iteration = config.utd_ratio * config.num_envs
    if round(per_iteration) >= 1:
        return round(per_iteration), 1
    return 1, max(1, round(1.0 / per_iteration))


def phase_of(config: SACConfig, iteration: int) -> Phase:
    """The phase of iteration `iteration` (0-based)."""
    warmup = warmup_iterations(config)
    if iteration < warmup - 1:
        return Phase.WARMUP
    if iteration == warmup - 1:
        return Phase.FIRST_UPDATE
    return Phase.LEARN


def segments(config: SACConfig, start: int, stop: int) -> list[tuple[Phase, int]]:
    """Iterations [start, stop) as consecutive (phase, count) runs."""
    warmup = warmup_iterations(config)
    cuts = [start, *(b for b in (warmup - 1, warmup) if start < b < stop), stop]
    out: list[tuple[Phase, int]] = []
    for begin, end in zip(cuts, cuts[1:], strict=False):
        phase = phase_of(config, begin)
        if out and out[-1][0] is phase:
            out[-1] = (phase, out[-1][1] + end - begin)
        else:
            out.append((phase, end - begin))
    return out


def validate_schedule(config: SACConfig) -> None:
    """Errors for settings the loop cannot honour, naming the fields."""
    if config.log_every % config.num_envs:
        raise ValueError(f"SACConfig.log_every={config.log_every} must be a multiple of "
                         f"num_envs={config.num_envs}")
    if config.total_env_steps % config.log_every:
        raise ValueError(f"SACConfig.total_env_steps={config.total_env_steps} must be a "
                         f"multiple of log_every={config.log_every}")
    if config.batch_size > config.buffer_capacity:
        raise ValueError(f"SACConfig.batch_size={config.batch_size} must be at most "
                         f"buffer_capacity={config.buffer_capacity}")
