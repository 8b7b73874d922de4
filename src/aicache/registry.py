"""Registries: every policy, advisor, trace format, system and experiment is found by name.

Entries may be objects or lazy ``"module:attr"`` strings, so importing the registry does not
import every implementation (the CLI stays fast, optional dependencies stay optional).
Registering a name twice is an error (as in fsspec's ``register_cache``): a typo that
shadows a policy would otherwise change results silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from aicache.errors import UnknownName

T = TypeVar("T")


class Registry(Generic[T]):
    """A name → implementation table with lazy imports and helpful errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._help: dict[str, str] = {}

    def register(self, name: str, obj: T | str, help: str = "") -> None:
        """Add ``name``; ``obj`` is the implementation or a lazy ``"module:attr"`` path."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        self._help[name] = help

    def decorator(self, name: str, help: str = "") -> Callable[[T], T]:
        """Class/function decorator form of :meth:`register`."""

        def deco(obj: T) -> T:
            self.register(name, obj, help)
            return obj

        return deco

    def get(self, name: str) -> T:
        """The implementation for ``name``; an unknown name lists the valid ones."""
        try:
            entry = self._entries[name]
        except KeyError:
            raise UnknownName(
                f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._entries))}"
            ) from None
        if not isinstance(entry, str):
            return entry
        module, _, attr = entry.partition(":")
        # a dotted path names the implementation the registration line promises (type T)
        loaded: T = getattr(importlib.import_module(module), attr)
        self._entries[name] = loaded
        return loaded

    def help(self, name: str) -> str:
        return self._help.get(name, "")

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
