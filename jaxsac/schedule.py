"""The static schedule of a run: phases, log periods and gradient steps per iteration.

An *iteration* steps every env once. The first ceil(learning_starts / num_envs)
iterations act at random (WARMUP); the last of them, once learning_starts steps are
stored, also takes the first gradient steps (FIRST_UPDATE); every later iteration acts
with the policy and learns (LEARN). Iterations are grouped into *log periods* of
log_every env steps. All of it is Python arithmetic on a `Schedule`, fixed at trace
time.
"""

from __future__ import annotations

import enum

from jaxsac.config import SCHEDULE, settings_type

Schedule = settings_type("Schedule", (SCHEDULE,), extra=("num_envs", "batch_size",
                                                         "buffer_capacity"))
"""The settings the schedule reads (`Schedule.of(config)`): the schedule's own fields,
num_envs (an iteration's env steps), batch_size and buffer_capacity (checked against
each other by `validate_schedule`)."""


class Phase(enum.Enum):
    """What an iteration does. The gymnasium loop compiles a block per phase; the JAX
    loop branches on the iteration's index inside one program (jaxsac.jax_loop)."""

    WARMUP = "warmup"  # random actions, no gradient steps
    FIRST_UPDATE = "first_update"  # random actions; learning_starts now stored: update
    LEARN = "learn"  # policy actions and gradient steps


def warmup_iterations(schedule: Schedule) -> int:
    """Iterations with random actions: ceil(learning_starts / num_envs)."""
    return -(-schedule.learning_starts // schedule.num_envs)


def iterations_per_period(schedule: Schedule) -> int:
    """Iterations of one log period: log_every / num_envs."""
    return schedule.log_every // schedule.num_envs


def num_periods(schedule: Schedule) -> int:
    """Log periods of the whole run: total_env_steps / log_every."""
    return schedule.total_env_steps // schedule.log_every


def gradient_schedule(schedule: Schedule) -> tuple[int, int]:
    """(gradient steps per update iteration, iterations between update iterations).

    round(utd_ratio * num_envs) per iteration (Python's round, halves to even) when that
    is at least one, else one every round(1 / (utd_ratio * num_envs)) iterations.
    """
    per_iteration = schedule.utd_ratio * schedule.num_envs
    if round(per_iteration) >= 1:
        return round(per_iteration), 1
    return 1, max(1, round(1.0 / per_iteration))


def phase_of(schedule: Schedule, iteration: int) -> Phase:
    """The phase of iteration `iteration` (0-based)."""
    warmup = warmup_iterations(schedule)
    if iteration < warmup - 1:
        return Phase.WARMUP
    if iteration == warmup - 1:
        return Phase.FIRST_UPDATE
    return Phase.LEARN


def segments(schedule: Schedule, start: int, stop: int) -> list[tuple[Phase, int]]:
    """Iterations [start, stop) as consecutive (phase, count) runs."""
    warmup = warmup_iterations(schedule)
    cuts = [start, *(b for b in (warmup - 1, warmup) if start < b < stop), stop]
    out: list[tuple[Phase, int]] = []
    for begin, end in zip(cuts, cuts[1:], strict=False):
        phase = phase_of(schedule, begin)
        if out and out[-1][0] is phase:
            out[-1] = (phase, out[-1][1] + end - begin)
        else:
            out.append((phase, end - begin))
    return out


def validate_schedule(schedule: Schedule) -> None:
    """Errors for settings the loop cannot honour, naming the fields."""
    if schedule.log_every % schedule.num_envs:
        raise ValueError(f"SACConfig.log_every={schedule.log_every} must be a multiple of "
                         f"num_envs={schedule.num_envs}")
    if schedule.total_env_steps % schedule.log_every:
        raise ValueError(f"SACConfig.total_env_steps={schedule.total_env_steps} must be a "
                         f"multiple of log_every={schedule.log_every}")
    if schedule.batch_size > schedule.buffer_capacity:
        raise ValueError(f"SACConfig.batch_size={schedule.batch_size} must be at most "
                         f"buffer_capacity={schedule.buffer_capacity}")
