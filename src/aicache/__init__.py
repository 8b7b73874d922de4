"""aicache: adaptive caching for AI systems.

One policy core (pure objects told the time and the event), two drivers (a trace-driven
simulator and the real engines). See ARCHITECTURE in the README.
"""

from __future__ import annotations

from aicache.native import pure_requested, use_pure_python

if pure_requested():  # before any compiled module can be imported
    use_pure_python()

__version__ = "0.1.0"

__all__ = ["__version__"]
