"""The vocabulary SACConfig's fields are declared with (`setting`): the part of a run
that reads a field, its roles, and the check its value must pass alone.

Every field names one part (PARTS) and any of the ROLES. The lists other modules need
(the fields a checkpoint must share, the sweepable ones, ...) are derived from these
declarations (`jaxsac.config.fields_with`), never written out by hand.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, Any, NamedTuple

import numpy as np
import tyro

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


class Name(NamedTuple):
    """A check: a non-empty string (an id, a registered name, a path), or None when
    `optional`."""
    what: str
    optional: bool = False


class Kwargs(NamedTuple):
    """A check: keyword arguments, a dict of string keys and JSON values (stored as a
    `FrozenKwargs`), or None when `optional`."""
    optional: bool = False


class Names(NamedTuple):
    """A check: a tuple of non-empty strings (non-empty itself when `optional`, where
    None is allowed instead)."""
    what: str
    optional: bool = False


POSITIVE = Real(0.0, math.inf, open_low=True)
Check = Choice | Bool | Int | Real | Name | Kwargs | Names


class FrozenKwargs(dict):
    """A read-only dict of keyword arguments with JSON values, keys sorted: hashable (a
    config is a static `jax.jit` argument), equal to the plain dict of the same items, and
    written to JSON as one."""

    def __init__(self, *args: Any, **kwargs: Any):
        items = dict(*args, **kwargs)
        super().__init__(sorted(items.items()))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True, default=repr))

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("FrozenKwargs is read-only: build a new dict instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return FrozenKwargs, (dict(self),)


JsonKwargs = Annotated[dict[str, Any], tyro.constructors.PrimitiveConstructorSpec(
    nargs=1, metavar="JSON", instance_from_str=lambda args: FrozenKwargs(json.loads(args[0])),
    is_instance=lambda value: isinstance(value, dict),
    str_from_instance=lambda value: [json.dumps(value)])]
"""The annotation of a keyword-arguments field: a dict, a JSON object on the command line
(`--env-kwargs '{"g": 9.81}'`)."""


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
    elif isinstance(check, Kwargs):
        if not (check.optional and value is None):
            check_kwargs(owner, name, value)
    elif isinstance(check, Names):
        if not (check.optional and value is None or isinstance(value, tuple)
                and (value or not check.optional)
                and all(isinstance(v, str) and v for v in value)):
            checks.fail(owner, name, value, ("None or a non-empty " if check.optional else "a ")
                        + f"tuple of {check.what} (non-empty strings)")
    elif isinstance(check, Name):
        if not (isinstance(value, str) and value or check.optional and value is None):
            checks.fail(owner, name, value, f"a non-empty {check.what}"
                        + (" or None" if check.optional else ""))
    else:
        checks.check_real(owner, name, value, check.low, check.high, open_low=check.open_low)


def check_kwargs(owner: str, name: str, value: Any) -> None:
    """The ValueError of jaxsac.checks when `value` is not a dict of keyword arguments
    (string keys that are Python identifiers) with JSON values."""
    allowed = "a dict of keyword arguments (identifier keys) with JSON values"
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k.isidentifier() for k in value):
        checks.fail(owner, name, value, allowed)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        checks.fail(owner, name, value, allowed + " (numbers, strings, bools, None, lists "
                    "and dicts of them)")


def normalized(value: Any) -> Any:
    """A field's value as a config holds it: lists (from JSON or a CLI) as tuples, numpy
    scalars as Python numbers, dicts as FrozenKwargs (a config is hashed and written as
    JSON)."""
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, tuple):
        value = tuple(_python_scalar(v) for v in value)
    if isinstance(value, dict):
        value = FrozenKwargs(value)
    return _python_scalar(value)


def jsonable(value: Any) -> Any:
    """A field's value as JSON holds it: tuples as lists, FrozenKwargs as dicts."""
    return list(value) if isinstance(value, tuple) else dict(value) if isinstance(
        value, dict) else value


def _python_scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
