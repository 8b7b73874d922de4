"""One contract for every registry in the package, found in the source rather than listed.

Every module-level ``NAME = Registry(...)`` under ``src/aicache`` (read with ``ast``, so a
registry added anywhere is tested with no new test code) must keep what
:class:`aicache.registry.Registry` promises:

* ``names()`` is non-empty, sorted and free of repeats, and agrees with ``len``, ``in`` and
  iteration;
* every name resolves through ``get()`` (lazy ``"module:attr"`` entries included) to what the
  registry's own annotation says it holds (``Registry[type[X]]``: a subclass of X;
  ``Registry[Callable[..., X]]``: a callable; ``Registry[X]``: an instance of X), and
  resolving twice gives the same object;
* an unknown name raises :class:`UnknownName` (a :class:`BadInput`: the CLI's one-line
  error, exit 2) whose one line names the registry's kind, the name given, and every valid
  choice in order.

Entries whose minimal arguments are generic are also built here (:data:`BUILDS`); for the
others :data:`BUILT_ELSEWHERE` says why not, or which test builds every entry already. A new
registry must be added to one of the two (checked), so nobody forgets to decide.
"""

from __future__ import annotations

import ast
import importlib
import random
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from aicache.errors import BadInput, UnknownName
from aicache.registry import Registry

SRC = Path(__file__).resolve().parents[2] / "src" / "aicache"


def _is_registry_call(value: ast.expr | None) -> bool:
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "Registry")


def _type_checking_imports(tree: ast.Module) -> list[ast.stmt]:
    """The imports a module makes only for the type checker (its annotations may name them)."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                     "typing.TYPE_CHECKING"):
            out += [s for s in node.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    return out


def _find_registries() -> dict[str, tuple[str, str, str | None, list[ast.stmt]]]:
    """``"module:NAME"`` -> (module, NAME, annotation source or None, TYPE_CHECKING imports)."""
    found: dict[str, tuple[str, str, str | None, list[ast.stmt]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in tree.body:  # module level only: a registry is its module's table
            if isinstance(node, ast.AnnAssign) and _is_registry_call(node.value):
                target, annotation = node.target, ast.unparse(node.annotation)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and _is_registry_call(node.value)):
                target, annotation = node.targets[0], None
            else:
                continue
            assert isinstance(target, ast.Name), (path, ast.unparse(target))
            found[f"{module}:{target.id}"] = (module, target.id, annotation,
                                              _type_checking_imports(tree))
    return found


FOUND = _find_registries()
IDS = sorted(FOUND)


def _registry(rid: str) -> Registry[Any]:
    module, attr, _, _ = FOUND[rid]
    reg = getattr(importlib.import_module(module), attr)
    assert isinstance(reg, Registry), rid
    return reg


def _promised(rid: str) -> Any:
    """The ``X`` of the registry's ``Registry[X]`` annotation, evaluated in its module (with
    the names its ``TYPE_CHECKING`` block imports); None when it has no annotation."""
    module, _, annotation, tc_imports = FOUND[rid]
    if annotation is None:
        return None
    ns = dict(vars(importlib.import_module(module)))
    exec(compile(ast.Module(body=tc_imports, type_ignores=[]), module, "exec"), ns)  # noqa: S102
    hint = eval(annotation, ns)  # noqa: S307 - the repository's own annotation text
    (promised,) = typing.get_args(hint)
    return promised


def _check_holds(obj: object, hint: Any, where: str) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is type:
        assert isinstance(obj, type) and issubclass(obj, args[0]), (where, obj, hint)
    elif origin is Callable:
        assert callable(obj), (where, obj, hint)
    elif origin is Mapping or origin is dict:
        assert isinstance(obj, Mapping), (where, obj, hint)
        for key, value in obj.items():
            assert isinstance(key, args[0]), (where, key)
            _check_holds(value, args[1], f"{where}[{key!r}]")
    elif isinstance(hint, type):
        assert isinstance(obj, hint), (where, obj, hint)
    else:
        pytest.fail(f"{where}: no check for the annotation {hint!r}; teach _check_holds it")


def test_the_source_scan_finds_the_registries_this_file_imports() -> None:
    # the scan is the test's only list of registries: prove it sees a known one of each
    # form (annotated, lazy entries; in a package __init__; in a plain module)
    from aicache.policies import EVICTION
    from aicache.traces.gen import WORKFLOWS
    assert _registry("aicache.policies:EVICTION") is EVICTION
    assert _registry("aicache.traces.gen:WORKFLOWS") is WORKFLOWS


@pytest.mark.parametrize("rid", IDS)
def test_names_are_non_empty_sorted_and_unique(rid: str) -> None:
    reg = _registry(rid)
    names = reg.names()
    assert names, f"{rid} registers nothing"
    assert names == sorted(set(names)) and len(names) == len(reg)
    assert list(reg) == names and all(n in reg for n in names)
    assert all(isinstance(reg.help(n), str) for n in names)


@pytest.mark.parametrize("rid", IDS)
def test_every_entry_resolves_to_what_the_registry_promises(rid: str) -> None:
    reg = _registry(rid)
    promised = _promised(rid)
    assert promised is not None, f"{rid}: annotate it as Registry[...] so entries can be checked"
    for name in reg.names():
        obj = reg.get(name)
        assert not isinstance(obj, str), (rid, name)  # a lazy path must resolve, not leak
        _check_holds(obj, promised, f"{rid}[{name!r}]")
        assert reg.get(name) is obj  # resolved once, then the same object


@pytest.mark.parametrize("rid", IDS)
def test_an_unknown_name_is_one_line_naming_every_valid_choice(rid: str) -> None:
    reg = _registry(rid)
    bad = "no-such-entry"
    with pytest.raises(UnknownName) as info:
        reg.get(bad)
    assert isinstance(info.value, BadInput)  # the CLI prints it on one line and exits 2
    msg = str(info.value)
    assert "\n" not in msg and reg.kind in msg and repr(bad) in msg
    assert msg.split("valid: ", 1)[1].split(", ") == reg.names()


# ------------------------------------------------------------------ building the entries
def _build_executors(reg: Registry[Any]) -> None:
    from aicache.adaptive.executors import Executor
    from aicache.policies.base import EvictionPolicy, PrefetchPolicy
    for name in reg.names():  # (capacity, rng): the pattern picks the rest
        ex = reg.get(name)(64, random.Random(0))
        assert isinstance(ex, Executor) and ex.capacity == 64
        assert isinstance(ex.prefetcher, PrefetchPolicy) and isinstance(ex.eviction, EvictionPolicy)


def _build_executor_sets(reg: Registry[Any]) -> None:
    from aicache.adaptive.executors import EXECUTORS, Executor
    for name in reg.names():  # each set covers exactly the patterns, each class builds
        table = reg.get(name)
        assert sorted(table) == EXECUTORS.names(), name
        for pattern, cls in table.items():
            assert isinstance(cls(64, random.Random(0)), Executor), (name, pattern)


def _build_named_no_args(base: str) -> Callable[[Registry[Any]], None]:
    """Entries built with no arguments whose ``name`` is their registered name."""
    def build(reg: Registry[Any]) -> None:
        module, _, attr = base.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        for name in reg.names():
            obj = reg.get(name)()
            assert isinstance(obj, cls) and obj.name == name, (name, obj)
    return build


def _build_dram_policies(reg: Registry[Any]) -> None:
    from aicache.kv.eviction import BlockEvictionPolicy
    for name in reg.names():  # make_dram_policy's minimum: a capacity in blocks
        policy = reg.get(name)(8)
        assert isinstance(policy, BlockEvictionPolicy) and policy.name == name
        assert len(policy) == 0


def _build_prefix_policies(reg: Registry[Any]) -> None:
    from aicache.kv.prefix_policies import PrefixPolicy
    for name in reg.names():  # make_prefix_policy's minimum: a capacity and an injected rng
        # (no name check: ``saecache-reuse`` is an alias, its policy is named ``saecache``)
        policy = reg.get(name)(1024, rng=random.Random(0))
        assert isinstance(policy, PrefixPolicy) and len(policy) == 0, name


def _build_sessions(reg: Registry[Any]) -> None:
    from aicache.traces.base import KVRequest
    for name in reg.names():  # (sessions, seed); the seed alone decides the requests
        first = list(reg.get(name)(2, 0))
        assert first and all(isinstance(r, KVRequest) for r in first), name
        assert list(reg.get(name)(2, 0)) == first, name


def _values_named_by_their_key(reg: Registry[Any]) -> None:
    for name in reg.names():  # value entries (no factory): each carries its own name
        assert reg.get(name).name == name


BUILDS: dict[str, Callable[[Registry[Any]], None]] = {
    "aicache.adaptive.executors:EXECUTORS": _build_executors,
    "aicache.adaptive.executors:EXECUTOR_SETS": _build_executor_sets,
    "aicache.policies:PREFETCH": _build_named_no_args("aicache.policies.base:PrefetchPolicy"),
    "aicache.datacache.version:SCHEMES": _build_named_no_args("aicache.datacache.version:VersionScheme"),
    "aicache.kv.eviction:DRAM_POLICIES": _build_dram_policies,
    "aicache.kv.prefix_policies:PREFIX_POLICIES": _build_prefix_policies,
    "aicache.traces.gen:SESSIONS": _build_sessions,
    "aicache.kv.models:MODELS": _values_named_by_their_key,
    "aicache.sim.kv:KV_SYSTEMS": _values_named_by_their_key,
}

#: registries whose entries are not built here, and why
BUILT_ELSEWHERE: dict[str, str] = {
    "aicache.policies:EVICTION": "tests/policies/test_policy_contract.py builds and drives every one",
    "aicache.datacache.policy.registry:DATACACHE_SYSTEMS":
        "tests/datacache/policy/test_datacache_system_contract.py runs every system",
    "aicache.experiments:EXPERIMENTS": "tests/experiments/test_experiments_quick.py runs every one",
    "aicache.traces.gen:WORKFLOWS": "tests/traces/test_workflows.py generates every workflow",
    "aicache.traces:FORMATS": "each format's minimal argument is a file in that format "
                              "(tests/traces/test_traces.py reads one per format)",
    "aicache.adaptive.advisor.registry:ADVISORS": "not generic: each advisor takes its own "
                                                  "arguments (an endpoint, a transcript, a lie "
                                                  "probability), parsed by make_advisor",
    "aicache.kv.admissions:SSD_ADMISSIONS": "not generic: an entry builds from an admission "
                                            "context, and some need a write budget or the "
                                            "whole trace (tests/kv/test_kv_peer_admission.py)",
}


def test_every_registry_is_built_here_or_says_why_not() -> None:
    assert not set(BUILDS) & set(BUILT_ELSEWHERE)
    assert set(BUILDS) | set(BUILT_ELSEWHERE) == set(IDS), "add the new registry to BUILDS or BUILT_ELSEWHERE"


@pytest.mark.parametrize("rid", sorted(set(BUILDS) & set(IDS)))
def test_entries_build_with_their_documented_minimal_arguments(rid: str) -> None:
    BUILDS[rid](_registry(rid))
