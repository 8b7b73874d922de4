"""Every command's ``--help`` description is whole sentences: no paragraph stops mid-way
(``mount`` and ``record`` used to show their docstring's first line only)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from aicache.cli.main import build_parser


def _commands(p: argparse.ArgumentParser, name: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for n, sp in a.choices.items():
                yield f"{name} {n}".strip(), sp
                yield from _commands(sp, f"{name} {n}")


COMMANDS = dict(_commands(build_parser()))


@pytest.mark.parametrize("name", [n for n, p in COMMANDS.items() if p.description])
def test_help_descriptions_are_whole_sentences(name: str) -> None:
    for para in COMMANDS[name].description.strip().split("\n\n"):
        assert para.rstrip()[-1] in ".):", f"aicache {name} --help stops mid-sentence: {para!r}"


@pytest.mark.parametrize("name, sentence", [
    ("mount", "through the adaptive block cache. Runs until SIGINT (Ctrl-C), SIGTERM or aicache umount"),
    ("record", "write every demand block access as a block-csv trace."),
    ("umount", "--lazy detaches a busy mount at once;"),
])
def test_mount_record_umount_help_print_their_whole_description(name: str, sentence: str) -> None:
    out = subprocess.run([sys.executable, "-m", "aicache.cli.main", name, "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    assert sentence in " ".join(out.split()) and "``" not in out


@pytest.mark.parametrize("command, registry", [
    ("sim kv", "aicache.sim.kv:KV_SYSTEMS"),
    ("sim datacache", "aicache.datacache.policy.registry:DATACACHE_SYSTEMS"),
])
def test_system_help_lists_every_registered_system(command: str, registry: str) -> None:
    """The ``--system`` help names every system the registry accepts (``oracle`` was missing
    from ``sim kv``'s although it runs)."""
    import importlib
    mod, attr = registry.split(":")
    names = getattr(importlib.import_module(mod), attr).names()
    action = next(a for a in COMMANDS[command]._actions if "--system" in a.option_strings)
    listed = {w.strip("(),") for w in (action.help or "").split()}
    assert names and set(names) <= listed, sorted(set(names) - listed)
