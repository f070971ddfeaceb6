"""Argument checks shared by every public entry point.

Each check raises `ValueError("<owner>: <name>=<value> is invalid: must be <allowed>")`,
naming the argument, its value and what is allowed, before anything is traced.
`owner` is the function or class the argument belongs to ("SACConfig",
"episode_buffer", "GymRunner", ...); `SACConfig` fields read "SACConfig.<name>=...".
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NoReturn


def fail(owner: str, name: str, value: Any, allowed: str) -> NoReturn:
    """Raise the ValueError "<owner>: <name>=<value> is invalid: must be <allowed>"."""
    separator = "." if owner == "SACConfig" else ": "
    raise ValueError(f"{owner}{separator}{name}={value!r} is invalid: must be {allowed}")


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A finite real number (Python or numpy), not a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def check_int(owner: str, name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """`value` as an int when it is an integer in [minimum, maximum]."""
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        fail(owner, name, value, f"an integer >= {minimum}" if maximum is None
             else f"an integer in [{minimum}, {maximum}]")
    return int(value)


def check_real(owner: str, name: str, value: Any, low: float, high: float, *,
               open_low: bool = False) -> float:
    """`value` as a float when it is a finite number in [low, high] ((low, high] when
    `open_low`)."""
    below = is_real(value) and (value <= low if open_low else value < low)
    if not is_real(value) or below or value > high:
        fail(owner, name, value, f"a finite number in {'(' if open_low else '['}{low}, {high}]")
    return float(value)


def check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    """`value` when it is one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        fail(owner, name, value, f"one of {list(choices)}")
    return value


def check_bool(owner: str, name: str, value: Any) -> bool:
    """`value` when it is a bool (not a truthy string or number)."""
    if not isinstance(value, bool):
        fail(owner, name, value, "True or False")
    return value


def check_n_step(owner: str, value: Any) -> tuple[int, int]:
    """(n_min, n_max) of an `n_step` argument: an integer n >= 1 or a pair (n_min, n_max)
    of integers with 1 <= n_min <= n_max."""
    if is_int(value) and value >= 1:
        return int(value), int(value)
    if (isinstance(value, (tuple, list)) and len(value) == 2 and all(is_int(n) for n in value)
            and 1 <= value[0] <= value[1]):
        return int(value[0]), int(value[1])
    fail(owner, "n_step", value,
         "an integer >= 1 or a pair (n_min, n_max) of integers with 1 <= n_min <= n_max")
