"""Factories by name for one extension point (encoders, critic families, policy heads):
what `register_encoder`, `register_critic` and `register_policy_head` add to, and where
a name in the config is looked up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxsac import checks


class Registry:
    """The factories of one extension point, by name, starting with the built-in ones.

    what: the extension point, for messages ("encoder"). adder: the function that
    registers one, for messages. The registry lives in this process: a name must be
    registered again in a fresh one before a run or a checkpoint that uses it.
    """

    def __init__(self, what: str, adder: str, builtins: dict[str, Any]):
        self.what, self.adder = what, adder
        self.builtins = frozenset(builtins)
        self.entries: dict[str, Any] = dict(builtins)

    def add(self, name: str, entry: Any, factory: Callable[..., Any], signature: str) -> None:
        """Register `entry` (the factory, or a record holding it) under `name`."""
        if not isinstance(name, str) or not name or name in self.builtins:
            checks.fail(self.adder, "name", name, "a non-empty string other than the "
                        f"built-in {sorted(self.builtins)}")
        if not callable(factory):
            checks.fail(self.adder, "factory", factory, f"callable {signature}")
        self.entries[name] = entry

    def names(self) -> list[str]:
        """The names registered in this process, built-in ones included."""
        return sorted(self.entries)

    def __getitem__(self, name: str) -> Any:
        return self.entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def missing(self, owner: str, field: str, name: Any) -> None:
        """The error for a name nobody registered, listing those that are."""
        checks.fail(owner, field, name, f"one of the registered {self.what}s {self.names()} "
                    f"({self.adder} adds one)")
