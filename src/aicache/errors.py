"""Errors that the CLI turns into one-line messages.

`BadInput` is the user's fault (unknown name, malformed trace record, impossible size):
the CLI prints its message on one line and exits 2. Anything else is a failed run (exit 1).
"""

from __future__ import annotations


class BadInput(ValueError):
    """Input the user can fix. The message names the input and the fix, on one line."""


class UnknownName(BadInput, KeyError):
    """A name that is not in a registry; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TraceFormatError(BadInput):
    """A malformed trace record; carries the record number."""

    def __init__(self, path: str, record: int, why: str) -> None:
        self.path = path
        self.record = record
        self.why = why
        super().__init__(
            f"{path}: record {record}: {why} (fix the record or pass --skip-bad to skip it)"
        )
