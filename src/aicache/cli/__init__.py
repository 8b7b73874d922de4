"""The ``aicache`` command line. Each command lives in its own module here."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    #: what every command's ``add_parser`` receives: the sub-parsers of ``aicache`` or of a group
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
