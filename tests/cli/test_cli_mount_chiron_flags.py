"""``aicache mount --gate`` / ``--prompt`` (as ``aicache sim datacache`` has them): the flags
reach the controller of the engine the mount serves — the same ChironParams the simulator
builds from the same flags — and a flag that cannot apply is exit 2 before mounting."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from aicache.adaptive.gate import DEFAULT_GATE_MODE
from aicache.cli.chiron_flags import gate_params
from aicache.cli.main import build_parser, main
from aicache.cli.mount import engine_config, engine_policy
from aicache.datacache.engine import CacheEngine
from aicache.datacache.policy.registry import make_system

MIB = 1 << 20


def _engine(tmp_path: Path, *flags: str) -> tuple[CacheEngine, object]:
    remote = tmp_path / "remote"
    remote.mkdir(exist_ok=True)
    (remote / "a.bin").write_bytes(bytes(range(256)) * 1024)
    args = build_parser().parse_args(["mount", str(remote), str(tmp_path / "mnt"),
                                      "--cache-dir", str(tmp_path / "cache"), "--cache-size", "4MiB",
                                      "--block-size", "64KiB", *flags])
    size, params = engine_config(args)
    policy, advisor = engine_policy(args, size, params.block_size)
    (tmp_path / "cache").mkdir(exist_ok=True)
    engine = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), size, policy=policy,
                         advisor=advisor, params=params, root=str(remote))
    return engine, advisor


@pytest.mark.parametrize("gate", [None, "seed", "aicache"])
def test_mount_gate_reaches_the_engines_controller(tmp_path: Path, gate: str | None) -> None:
    engine, _ = _engine(tmp_path, *(["--gate", gate] if gate else []))
    try:
        system = engine.policy.system  # type: ignore[attr-defined]
        assert system.params.gate_mode == (gate or DEFAULT_GATE_MODE)
        # the simulator's chiron from `sim datacache --gate ...` has the same parameters
        sim = make_system("chiron", 4 * MIB, 64 * 1024, **gate_params(gate, "chiron", "--system"))
        assert system.params == sim.params
        sim.close()
        meta = engine.stat(str(tmp_path / "remote" / "a.bin"))
        assert bytes(engine.read_block(meta, 1)) == (bytes(range(256)) * 1024)[64 * 1024:128 * 1024]
    finally:
        engine.close()


def test_mount_prompt_reaches_the_engines_advisor(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AICACHE_OPENAI_MODEL", "a-model")  # no request is made
    monkeypatch.setenv("AICACHE_OPENAI_BASE_URL", "http://127.0.0.1:9")
    engine, advisor = _engine(tmp_path, "--advisor", "openai", "--prompt", "seed")
    try:
        system = engine.policy.system  # type: ignore[attr-defined]
        assert system.advisor is advisor and system.advisor.prompt == "seed"
    finally:
        engine.close()


@pytest.mark.parametrize("flags, needle", [
    (["--gate", "seed", "--policy", "lru"], "--gate applies to --policy chiron"),
    (["--prompt", "seed"], "--prompt applies to the openai advisor"),
])
def test_mount_chiron_flag_that_cannot_apply_exits_2(tmp_path: Path, flags: list[str], needle: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mnt").mkdir()
    (tmp_path / "remote").mkdir()
    rc = main(["mount", str(tmp_path / "remote"), str(tmp_path / "mnt"), "--cache-dir",
               str(tmp_path / "cache"), "--cache-size", "4MiB", "--foreground", *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and "\n" not in err
