"""Per-class ABC caches for the classes mypyc compiles.

mypyc builds a class without running ``ABCMeta.__new__``, so a compiled class has no
``_abc_impl`` of its own: every compiled class inherits one shared cache (in the end
``abc.ABC``'s), and an ``isinstance``/``issubclass`` answer cached for one of them is
returned for all (a pure-Python LFU once found an ``EvictionPolicy`` is then "a
``SlotPolicy``" too, and an ``LRUPrefix`` once found not an ``SAECache`` stops being a
``PrefixPolicy``). Each compiled module calls :func:`own_abc_caches` with its classes as
soon as they exist, before any check can fill the shared cache. On the pure path the
classes already own their caches and the call changes nothing. ``tests/core/test_native.py``
checks that every ABC-derived class of every compiled module owns its cache.
"""

from __future__ import annotations

import importlib
from abc import ABCMeta
from typing import Callable


def _c_abc_init() -> Callable[[type], None] | None:
    """CPython's ``_abc._abc_init`` (the C implementation behind ``abc.ABCMeta``; typeshed
    has no stub for the private module), or None where there is none (no runtime without
    it runs compiled classes)."""
    try:
        init: Callable[[type], None] = getattr(importlib.import_module("_abc"), "_abc_init")
    except (ImportError, AttributeError):  # pragma: no cover
        return None
    return init


_abc_init = _c_abc_init()


def own_abc_caches(*classes: type) -> None:
    """Give each ABC-derived class that lacks one its own ABC cache (see module docstring)."""
    if _abc_init is None:  # pragma: no cover
        return
    for cls in classes:
        if isinstance(cls, ABCMeta) and "_abc_impl" not in cls.__dict__:
            _abc_init(cls)
