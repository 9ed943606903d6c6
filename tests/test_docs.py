"""The project's Markdown: every relative link names a file that exists, and every
`#anchor` a heading of the file it points into (as GitHub renders its anchors), so five
people editing the docs at once cannot leave a reader at a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "deploy" / "README.md",
    REPO / "tests" / "controlplane" / "README.md",
    REPO / "bench" / "results" / "HISTORY.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(path):
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading:
            name = slug(heading.group(1))
            repeats = seen.get(name, 0)
            seen[name] = repeats + 1
            found.add(name if not repeats else f"{name}-{repeats}")
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for number, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.name}:{number}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.name}:{number}: {target}: no such heading")
    return broken


def test_github_anchors_are_derived_as_github_derives_them() -> None:
    assert slug("Composite gangs (1.37 `CompositePodGroup`)") == (
        "composite-gangs-137-compositepodgroup"
    )
    assert slug("Naming a gang: keys, /debug/groups, `kubectl phalanx`") == (
        "naming-a-gang-keys-debuggroups-kubectl-phalanx"
    )


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n## Twice\n\n## Twice\n\n"
        "[ok](#top) [second](#twice-1) [gone](#nowhere) [file](missing.md) [web](https://x)\n"
        "```\n[in code](nothing.md)\n```\n"
    )
    assert broken_links(page) == [
        "page.md:7: #nowhere: no such heading",
        "page.md:7: missing.md: no such file",
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_its_file_and_heading(path: Path) -> None:
    assert broken_links(path) == []
