"""Links inside the project's Markdown point at headings that exist: a `(#anchor)` at a heading of
the same file, a `(file.md#anchor)` at a file of the repository and a heading in it. (A heading
renamed or dropped in an edit once left the summary table of docs/benchmarks.md pointing at
nothing.) Anchors are spelled as GitHub spells them: lower case, punctuation dropped, spaces
turned into hyphens, a repeated heading numbered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, as GitHub renders it."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_anchors_are_spelled_as_github_spells_them():
    text = "# Suite\n## Where it stands (issue 21, 6 December): `x` 4x\n## Suite\n```\n# no\n```\n"
    assert anchors(text) == {"suite", "where-it-stands-issue-21-6-december-x-4x", "suite-1"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_to_a_heading_finds_it(doc: Path):
    text = doc.read_text()
    broken = []
    for target, anchor in LINK.findall(FENCE.sub("", text)):
        if target.startswith(("http://", "https://")):
            continue
        path = (doc.parent / target).resolve() if target else doc
        if not path.is_file():
            broken.append(f"{target}#{anchor}: no such file")
        elif anchor not in anchors(path.read_text()):
            broken.append(f"{target}#{anchor}: no such heading")
    assert not broken, broken
