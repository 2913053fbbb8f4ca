"""Every relative link in the README and the docs/ pages leads somewhere: to a file or folder of
the repository and, for a `#anchor` into a Markdown page, to one of its headings (named as GitHub
names them)."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    REPO_ROOT / "kit" / "README.md",
    REPO_ROOT / "terraform" / "README.md",
]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (`-` and `_` kept), spaces
    as `-`."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text()):
        heading = HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` whose file, or whose anchor in a Markdown page, is missing."""
    broken = []
    for line in prose_lines(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if SCHEME.match(target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{target}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{target}: no heading with that anchor")
    return broken


def test_every_relative_link_resolves() -> None:
    broken = {str(page.relative_to(REPO_ROOT)): found for page in PAGES if (found := broken_links(page))}
    assert broken == {}


def test_a_missing_file_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## The `spotjobs status` command\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Two words\n\n"
        "[ok](other.md#the-spotjobs-status-command) [ok](#two-words) [ok](https://example.com/x#y)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) [bad here](#three-words)\n"
        "`[code](not-a-link.md)`\n```\n[fenced](not-a-link-either.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with that anchor",
        "#three-words: no heading with that anchor",
    ]


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Notes\n\n## How main.py imports shared\n")
    assert anchors(page) == {"notes", "notes-1", "how-mainpy-imports-shared"}
