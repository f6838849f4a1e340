"""The repository's LICENSE file is the licence ``pyproject.toml`` declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TITLES = {"Apache-2.0": ("Apache License", "Version 2.0")}


def test_license_file_matches_the_declared_licence() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert declared in TITLES, f"no known title for the declared licence {declared!r}"
    head = (ROOT / "LICENSE").read_text()[:400]
    for part in TITLES[declared]:
        assert part in head, f"LICENSE does not read as {declared}: {part!r} missing"
