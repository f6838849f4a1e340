"""The headline figures of the documentation have one source, docs/figures.yml: every page that
must quote a figure quotes its value in the form the figure's pattern describes, no user page
quotes another value for the same quantity, and the results page lists every value beside the
run it comes from. A new benchmark changes the file, the results page and the pages together, or
this fails."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.unit.test_readme_links import HEADING, slug

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FIGURES = DOCS / "figures.yml"
RESULTS = DOCS / "benchmark-results.md"
RESULTS_TABLE = "The figures the other pages quote"
# Pages that keep measurements' history (other runs, other machines): they may quote any value.
HISTORY_PAGES = {"benchmark-results.md", "development.md"}


@dataclass(frozen=True)
class Figure:
    key: str
    value: str
    run: str
    quoted_in: tuple[str, ...]
    pattern: re.Pattern[str] | None


def load_figures() -> list[Figure]:
    document = yaml.safe_load(FIGURES.read_text())
    return [
        Figure(
            key=key,
            value=str(entry["value"]),
            run=str(entry["run"]),
            quoted_in=tuple(entry["quoted_in"]),
            pattern=re.compile(entry["pattern"]) if entry.get("pattern") else None,
        )
        for key, entry in document["figures"].items()
    ]


FIGURE_LIST = load_figures()


def prose(text: str) -> str:
    """A page as the reader sees its words: one space for any line break or run of spaces, and
    no bold markers, so a figure wrapped across lines or set in bold is still found."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def user_pages() -> list[Path]:
    """README.md and every page of docs/ but those that keep the measurements' history."""
    pages = sorted(page for page in DOCS.glob("*.md") if page.name not in HISTORY_PAGES)
    return [ROOT / "README.md", *pages]


def results_table() -> str:
    text = RESULTS.read_text()
    match = re.search(rf"^## {re.escape(RESULTS_TABLE)}\s*$(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/benchmark-results.md has no section '## {RESULTS_TABLE}'"
    return prose(match.group(1))


def test_prose_joins_wrapped_and_bold_figures() -> None:
    assert prose("spends **55 to 61\n  µs** of CPU") == "spends 55 to 61 µs of CPU"


def test_the_file_names_real_pages_and_runs() -> None:
    headings = {slug(heading) for heading in HEADING.findall(RESULTS.read_text())}
    assert FIGURE_LIST, "docs/figures.yml holds no figure"
    for figure in FIGURE_LIST:
        assert figure.value.strip() == figure.value and figure.value, figure.key
        assert figure.quoted_in, f"{figure.key}: no page quotes it"
        for page in figure.quoted_in:
            assert (ROOT / page).is_file(), f"{figure.key}: {page} does not exist"
            assert Path(page).name not in HISTORY_PAGES, f"{figure.key}: {page} is a history page"
        assert figure.run in headings, f"{figure.key}: no section #{figure.run} in the results"


@pytest.mark.parametrize("figure", FIGURE_LIST, ids=lambda figure: figure.key)
def test_the_results_page_lists_the_figure(figure: Figure) -> None:
    assert figure.value in results_table(), (
        f"{figure.key}: {figure.value} is not in the results page's table ('{RESULTS_TABLE}')"
    )


@pytest.mark.parametrize("figure", FIGURE_LIST, ids=lambda figure: figure.key)
def test_every_page_that_must_quote_the_figure_does(figure: Figure) -> None:
    for page in figure.quoted_in:
        text = prose((ROOT / page).read_text())
        assert figure.value in text, f"{page} does not quote {figure.key} ({figure.value})"
        if figure.pattern is not None:
            found = [match.group(1) for match in figure.pattern.finditer(text)]
            assert figure.value in found, (
                f"{page} quotes {figure.key} ({figure.value}) but not in the form "
                f"{figure.pattern.pattern!r} (found {found})"
            )


@pytest.mark.parametrize(
    "figure", [f for f in FIGURE_LIST if f.pattern is not None], ids=lambda figure: figure.key
)
def test_no_page_quotes_another_value(figure: Figure) -> None:
    assert figure.pattern is not None
    conflicts = [
        f"{page.relative_to(ROOT)}: {match.group(0)!r}"
        for page in user_pages()
        for match in figure.pattern.finditer(prose(page.read_text()))
        if match.group(1) != figure.value
    ]
    assert conflicts == [], (
        f"{figure.key} is {figure.value} in docs/figures.yml; these pages say otherwise"
    )
