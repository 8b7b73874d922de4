"""The core pieces every part builds on: registry, size parsing, the cache template."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicache.errors import BadInput, UnknownName
from aicache.policies import EVICTION, make_eviction
from aicache.registry import Registry
from aicache.sim.cache import Cache
from aicache.units import parse_bool, parse_count, parse_duration, parse_ratio, parse_seconds, parse_size


def test_registry_lists_valid_names_on_typo() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("a", 1)
    reg.register("b", "math:pi")
    assert reg.get("a") == 1
    assert abs(reg.get("b") - 3.14159) < 1e-4  # lazy import resolved
    with pytest.raises(UnknownName) as exc:
        reg.get("c")
    msg = str(exc.value)
    assert "unknown widget 'c'" in msg and "valid: a, b" in msg
    with pytest.raises(ValueError):
        reg.register("a", 2)


def test_unknown_eviction_policy_is_bad_input() -> None:
    with pytest.raises(BadInput, match="valid: .*lru"):
        make_eviction("no-such-policy", 10)
    assert "lru" in EVICTION


@pytest.mark.parametrize(
    ("text", "total", "expected"),
    [("4GiB", None, 4 * 1024**3), ("512MiB", None, 512 * 1024**2), ("1000", None, 1000),
     ("10%", 5000, 500), ("1.5k", None, 1500), (42, None, 42)],
)
def test_parse_size(text: str, total: int | None, expected: int) -> None:
    assert parse_size(text, total=total) == expected


@pytest.mark.parametrize("given, expected", [
    (True, True), ("true", True), ("TRUE", True), ("1", True), ("yes", True), ("on", True), (1, True),
    (False, False), ("false", False), ("0", False), ("no", False), ("off", False), ("", False), (0, False)])
def test_parse_bool_reads_the_string_forms_clients_send(given: object, expected: bool) -> None:
    assert parse_bool(given, what="flag") is expected


@pytest.mark.parametrize("bad", ["perhaps", "2", 2, "truthy"])
def test_parse_bool_refuses_anything_else_by_name(bad: object) -> None:
    with pytest.raises(BadInput, match="share_engine"):
        parse_bool(bad, what="share_engine")


def test_numbers_in_their_string_forms() -> None:
    assert parse_count("8", what="n") == parse_count(8, what="n") == 8
    assert parse_seconds("60", what="t") == parse_seconds(60, what="t") == 60.0
    assert parse_seconds("5min", what="t") == 300.0
    assert parse_seconds("none", what="t", optional=True) is None
    assert parse_ratio("0.25", what="r") == 0.25
    for fn, bad in [(parse_count, "8.5"), (parse_count, "-1"), (parse_count, True),
                    (parse_seconds, "-2"), (parse_seconds, None), (parse_ratio, "nan"),
                    (parse_ratio, "half")]:
        with pytest.raises(BadInput, match="the_option"):
            fn(bad, what="the_option")


@pytest.mark.parametrize("bad", ["4 GiBs", "abc", "%", "-1"])
def test_parse_size_rejects_garbage_naming_input(bad: str) -> None:
    with pytest.raises(BadInput, match="cache size"):
        parse_size(bad, total=100, what="cache size")


def test_parse_size_percentage_needs_total() -> None:
    with pytest.raises(BadInput, match="working set"):
        parse_size("10%")


def test_parse_duration() -> None:
    assert parse_duration("12h") == 43200
    assert parse_duration("30min") == 1800
    assert parse_duration("250ms") == 0.25
    with pytest.raises(BadInput):
        parse_duration("soon")


def _reference_lru_misses(trace: list[int], cap: int) -> int:
    """Plain list-based LRU: obviously correct, O(n·cap)."""
    order: list[int] = []
    misses = 0
    for k in trace:
        if k in order:
            order.remove(k)
        else:
            misses += 1
            if len(order) == cap:
                order.pop(0)
        order.append(k)
    return misses


@given(st.lists(st.integers(0, 30), max_size=300), st.integers(1, 12))
def test_cache_template_with_lru_matches_reference(trace: list[int], cap: int) -> None:
    cache = Cache(cap, make_eviction("lru", cap))
    for t, k in enumerate(trace):
        cache.request(k, 1, t)
        assert cache.used <= cap
        assert set(cache.keys()) == set(cache.policy.keys())
    assert cache.stats.requests - cache.stats.hits == _reference_lru_misses(trace, cap)


def test_bytes_mode_object_larger_than_cache_is_not_inserted() -> None:
    cache = Cache(100, make_eviction("lru", 100), size_mode="bytes")
    assert cache.request(1, 60, 0) is False
    assert cache.request(2, 150, 1) is False  # too big: miss, nothing evicted
    assert 1 in cache and 2 not in cache
    assert cache.request(3, 50, 2) is False  # evicts 1
    assert 1 not in cache and cache.used == 50
