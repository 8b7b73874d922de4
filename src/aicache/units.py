"""Size and duration parsing shared by the CLI, config files and experiment specs."""

from __future__ import annotations

import math
import re

from aicache.errors import BadInput

#: the data cache's block size unless told otherwise (the engine, the daemon, the mount, the
#: fsspec filesystem, the simulator and the workflow generators): JuiceFS's default, 4 MiB
DEFAULT_BLOCK_SIZE = 4 << 20

#: the largest size any option takes (2**63 - 1: what a signed 64-bit integer — SQLite's
#: and numpy's int64 — holds); larger ones are a typo, never a budget
MAX_SIZE = (1 << 63) - 1

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str | int | float, *, total: int | None = None, what: str = "size") -> int:
    """Parse ``4GiB``, ``512MiB``, ``1000`` or ``10%`` (of ``total``) into an integer.

    A percentage needs ``total`` (the working set or dataset size). Errors name the input.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise BadInput(f"{what} {text!r} is negative; give a positive size")
        return _bounded(text, text, what)
    s = str(text).strip()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise BadInput(f"{what} {text!r} is not a percentage like 10%") from None
        if total is None:
            raise BadInput(f"{what} {text!r}: a percentage needs a known working set; give an absolute size")
        if pct < 0:
            raise BadInput(f"{what} {text!r} is negative; give a positive size")
        return _bounded(total * pct / 100.0, text, what)
    m = _SIZE.match(s)
    if not m or m.group(2).lower() not in _UNITS:
        raise BadInput(f"{what} {text!r} is not a size; use e.g. 4GiB, 512MiB, 1000 or 10%")
    num, unit = m.group(1), _UNITS[m.group(2).lower()]
    return _bounded(int(num) * unit if num.isdigit() else float(num) * unit, text, what)


def _bounded(value: float, text: object, what: str) -> int:
    if (isinstance(value, float) and not math.isfinite(value)) or value > MAX_SIZE:
        raise BadInput(f"{what} {text!r} is too large (the largest size is 2**63-1 bytes, 8 EiB); "
                       "give e.g. 4GiB")
    return int(value)


_DUR = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_duration(text: str | int | float, *, what: str = "duration") -> float:
    """Parse ``12h``, ``30min``, ``45s``, ``250ms`` or a plain number of seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _DURATION.match(str(text))
    if not m or m.group(2).lower() not in _DUR:
        raise BadInput(f"{what} {text!r} is not a duration; use e.g. 12h, 30min, 45s or 250ms")
    return float(m.group(1)) * _DUR[m.group(2).lower()]


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


def parse_bool(value: str | bool | int, *, what: str = "option") -> bool:
    """A flag given as a bool or as the string a URL, a config file or a client that passes
    every option as text (Polars' ``storage_options``) writes: ``true``/``false``,
    ``1``/``0``, ``yes``/``no``, ``on``/``off``. Anything else is a BadInput: ``bool("false")``
    is True, so a lenient cast would turn an explicit "off" into "on"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise BadInput(f"{what} {value!r} is not true or false; give true or false")


def parse_count(value: str | int, *, what: str = "count", minimum: int = 0) -> int:
    """A whole number ≥ ``minimum``, given as an int or its decimal text (``"8"``)."""
    if isinstance(value, bool):
        raise BadInput(f"{what} {value!r} is not a whole number; give e.g. 8")
    try:
        n = int(value) if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise BadInput(f"{what} {value!r} is not a whole number; give e.g. 8") from None
    if n < minimum:
        raise BadInput(f"{what} {value!r} is below {minimum}; give a number ≥ {minimum}")
    return n


def parse_seconds(value: str | int | float | None, *, what: str = "duration",
                  optional: bool = False) -> float | None:
    """Non-negative seconds from a number or a duration text (``"60"``, ``"30s"``,
    ``"5min"``); with ``optional``, None or ``"none"``/``""`` mean "no limit"."""
    if optional and (value is None or str(value).strip().lower() in ("", "none")):
        return None
    if value is None or isinstance(value, bool):
        raise BadInput(f"{what} {value!r} is not a duration; give seconds, e.g. 60 or 30s")
    s = parse_duration(value, what=what)
    if not math.isfinite(s) or s < 0:
        raise BadInput(f"{what} {value!r} is not a non-negative duration; give e.g. 60 or 30s")
    return s


def parse_ratio(value: str | int | float, *, what: str = "ratio") -> float:
    """A number given as a float or its text (``"0.1"``)."""
    if isinstance(value, bool):
        raise BadInput(f"{what} {value!r} is not a number; give e.g. 0.1")
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{what} {value!r} is not a number; give e.g. 0.1") from None
    if not math.isfinite(r):
        raise BadInput(f"{what} {value!r} is not a finite number; give e.g. 0.1")
    return r


def format_bytes(n: float) -> str:
    """Human-readable binary size, e.g. ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
