"""Every alert rule links its runbook: a ``runbook_url`` annotation naming a section of the docs
that exists, and docs/runbooks.md has a section for each rule and none for a rule that is gone."""

from __future__ import annotations

import re

import yaml

from tests.deploy.helm_support import CHART_DIR
from tests.unit.test_readme_links import HEADING, ROOT, slug

RULES = CHART_DIR / "rules" / "chronos-alerts.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def alert_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def sections(markdown: str) -> dict[str, str]:
    """Each ``##`` section's anchor and text."""
    parts = re.split(r"^## (.+?)\s*$", markdown, flags=re.M)
    return {slug(title): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_rule_links_a_runbook_section_that_exists() -> None:
    rules = alert_rules()
    assert len(rules) >= 10
    for rule in rules:
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = annotations.get("runbook_url")
        assert url, f"{rule['alert']} has no runbook_url"
        path, _, anchor = str(url).partition("#")
        target = ROOT / path
        assert path.startswith("docs/") and target.is_file(), f"{rule['alert']}: {url}"
        headings = {slug(h) for h in HEADING.findall(target.read_text())}
        assert anchor in headings, f"{rule['alert']}: {url} names no heading of {path}"


def test_the_runbooks_page_has_a_section_per_rule_and_no_other() -> None:
    written = sections(RUNBOOKS.read_text())
    alerts = {str(rule["alert"]) for rule in alert_rules()}
    assert set(written) == {alert.lower() for alert in alerts}
    for anchor, body in written.items():
        for part in ("**What it means**", "**Check**", "**Do**"):
            assert part in body, f"runbook {anchor} has no {part}"
