"""The README's relative links reach a file of the repository and, with an anchor, a heading of
it (the docs pages themselves are checked by ``mkdocs build --strict``)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def slug(heading: str) -> str:
    """The anchor Python-Markdown's table of contents gives a heading."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def relative_links(markdown: str) -> list[str]:
    return [link for link in LINK.findall(markdown) if not re.match(r"[a-z]+:", link)]


def test_slug_matches_the_table_of_contents() -> None:
    assert slug("The embedded broker and its limits") == "the-embedded-broker-and-its-limits"
    assert slug("From Python: `chronos.client`") == "from-python-chronosclient"


@pytest.mark.parametrize("link", relative_links((ROOT / "README.md").read_text()))
def test_readme_link_resolves(link: str) -> None:
    path, _, anchor = link.partition("#")
    target = ROOT / path
    assert target.is_file(), f"README links to {path}, which does not exist"
    if anchor:
        headings = {slug(h) for h in HEADING.findall(target.read_text())}
        assert anchor in headings, f"README links to {link}: no such heading in {path}"
