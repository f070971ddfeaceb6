"""The vocabulary SACConfig's fields are declared with (`setting`): the part of a run
that reads a field, its roles, and the check its value must pass alone.

Every field names one part (PARTS) and any of the ROLES. The lists other modules need
(the fields a checkpoint must share, the sweepable ones, ...) are derived from these
declarations (`jaxsac.config.fields_with`), never written out by hand.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from jaxsac import checks

ENV, RUNNERS, RUN, SCHEDULE, LEARNER, NETWORKS, EXPLORATION, REPLAY, EVALUATION, \
    LOGGING, CHECKPOINTS = PARTS = ("env", "runners", "run", "schedule", "learner",
                                    "networks", "exploration", "replay", "evaluation",
                                    "logging", "checkpoints")
"""The part of a run that reads a field (each field has exactly one)."""

STRUCTURAL = "structural"
"""Fixes the shapes of the run's arrays, or what they mean: a restored state must share it."""
SWEEPABLE = "sweepable"
"""`make_train(config, sweep=...)` takes it as a traced argument (vmappable)."""
LEARNER_ARRAY = "learner_array"
"""Held as an array leaf of the learner's state (`learner.Hyperparams`), in field order."""
ENV_STEP_COUNT = "env_step_count"
"""Counted in env steps: each agent's own in a multi-agent config, scaled per module."""
NOT_COMPILED = "not_compiled"
"""Leaves the compiled JAX program unchanged: `train` reuses its programs across it."""
ROLES = (STRUCTURAL, SWEEPABLE, LEARNER_ARRAY, ENV_STEP_COUNT, NOT_COMPILED)


class Choice(NamedTuple):
    """A check: one of `choices`."""
    choices: tuple[str, ...]


class Bool(NamedTuple):
    """A check: True or False (not a truthy string or number)."""


class Int(NamedTuple):
    """A check: an integer in [minimum, maximum]."""
    minimum: int
    maximum: int | None = None


class Real(NamedTuple):
    """A check: a finite number in [low, high] ((low, high] when `open_low`)."""
    low: float
    high: float
    open_low: bool = False


POSITIVE = Real(0.0, math.inf, open_low=True)
Check = Choice | Bool | Int | Real


def setting(default: Any, part: str, *roles: str, check: Check | None = None) -> Any:
    """A SACConfig field: its default, the part of a run that reads it, its roles, and
    the check its value must pass alone (checks across fields are in `_validate`)."""
    assert part in PARTS and all(role in ROLES for role in roles), (part, roles)
    return dataclasses.field(default=default, metadata={"part": part, "roles": roles,
                                                        "check": check})


def check_value(owner: str, name: str, value: Any, check: Check) -> None:
    """The ValueError of jaxsac.checks when `value` of the field `name` fails `check`."""
    if isinstance(check, Choice):
        checks.check_choice(owner, name, value, check.choices)
    elif isinstance(check, Bool):
        checks.check_bool(owner, name, value)
    elif isinstance(check, Int):
        checks.check_int(owner, name, value, check.minimum, check.maximum)
    else:
        checks.check_real(owner, name, value, check.low, check.high, open_low=check.open_low)
