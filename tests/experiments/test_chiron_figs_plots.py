"""``chiron-statistics`` (Fig. 14a) and ``chiron-theta`` (Fig. 17) plot their figures, as their
sibling experiments do: rendered from the stored rows of ``docs/results`` (the LLM cells are
recorded there, not rerun)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aicache.experiments.report import render_sections

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


@pytest.mark.parametrize("name, pngs", [
    ("chiron-statistics", ["statistics_f1.png", "statistics_chr.png"]),
    ("chiron-theta", ["theta_reviews.png", "theta_recovery.png", "theta_tokens.png"]),
])
def test_report_plots_the_figures_from_stored_rows(tmp_path: Path, name: str, pngs: list[str]) -> None:
    shutil.copytree(RESULTS / name, tmp_path / name, ignore=shutil.ignore_patterns("*.png", ".lock"))
    (sec,) = render_sections(tmp_path, [name])
    assert sec.error is None, sec.error
    assert sec.section is not None
    assert [Path(f.path).name for f in sec.section.figures] == pngs
    for f in sec.section.figures:
        assert Path(f.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, ours", [
    ("chiron-advisors", "ours, JCT vs Chiron with the statistical advisor: W1 gemma3-270m"),
    ("chiron-async", "gemma3-270m (measured latency): mean delay"),
    ("chiron-confidence", "ours: gemma3-270m, seed gate"),
    ("chiron-statistics", "ours (without vs with): gemma3-270m:"),
    ("chiron-interval", "ours (reflection off)"),
    ("chiron-theta", "From theta 0.40 to 0.10 the seed"),
])
def test_llm_figures_put_the_seeds_numbers_beside_ours(tmp_path: Path, name: str, ours: str) -> None:
    """Issue 19 must-show 3: each LLM figure's section, rendered from the published rows, has
    the seed's numbers in its published table and a sentence that sets ours against them."""
    shutil.copytree(RESULTS / name, tmp_path / name, ignore=shutil.ignore_patterns("*.png", ".lock"))
    (sec,) = render_sections(tmp_path, [name])
    assert sec.error is None and sec.section is not None, sec.error
    assert sec.section.published
    assert "from the seed" in sec.section.description and ours in sec.section.description
