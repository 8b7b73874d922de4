"""What :mod:`aicache.policies.slotcore` uses of Cython's pure-Python mode, for running
it uncompiled where Cython is not installed (Cython is a build dependency only). With
Cython installed its own ``cython`` module plays this part; the results are the same.

The decorators return their argument, :func:`cast` returns the value (the core's
arithmetic never relies on C overflow), and the C type names exist only to be named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

compiled = False

int = longlong = ulonglong = schar = char = uchar = double = bint = Py_ssize_t = void = object


def _identity(obj: _T) -> _T:
    return obj


cclass = ccall = cfunc = final = inline = _identity


def exceptval(*args: object, **kwargs: object) -> Callable[[_T], _T]:
    return _identity


def cast(typ: object, value: _T) -> _T:
    return value


def declare(typ: object, value: object = None, **kwargs: object) -> object:
    return value
