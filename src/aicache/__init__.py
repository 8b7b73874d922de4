"""aicache: adaptive caching for AI systems.

One policy core (pure objects told the time and the event), two drivers (a trace-driven
simulator and the real engines). docs/layout.md maps the packages.
"""

from __future__ import annotations

from aicache.native import pure_requested, skip_retired, stale_sources, use_pure_python

skip_retired()  # an old build's extensions of modules that are Python now never load
if pure_requested():  # before any compiled module can be imported
    use_pure_python()
elif _stale := stale_sources():
    import warnings

    warnings.warn(f"aicache: {', '.join(_stale)} edited or added since the install compiled the hot path; "
                  "running the pure-Python sources (reinstall to compile again)", stacklevel=2)
    use_pure_python()

#: the release (pyproject.toml reads it; CHANGELOG.md says what each release changed)
__version__ = "0.1.0"

__all__ = ["__version__"]
