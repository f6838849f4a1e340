"""The house's layout, held: no two modules import each other, no module past 500 lines, no
folder past a dozen modules, and no three modules of one folder sharing a name's prefix (a room
waiting to be made)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import grimp

import chronos

PACKAGE = Path(chronos.__file__).parent
MAX_LINES = 500
MAX_MODULES = 12


def test_no_two_modules_import_each_other() -> None:
    graph = grimp.build_graph("chronos")
    circles = sorted(
        (module, other)
        for module in graph.modules
        for other in graph.find_modules_directly_imported_by(module)
        if module < other and module in graph.find_modules_directly_imported_by(other)
    )
    assert circles == []


def test_no_module_is_past_the_house_size() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_folder_is_a_room_of_a_dozen_modules_at_most() -> None:
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]:
        modules = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
        if folder == PACKAGE:
            continue  # the top: the CLI, client, importer, preflight, protocol, recurrence
        assert len(modules) <= MAX_MODULES, f"{folder.relative_to(PACKAGE)}: {sorted(modules)}"
        prefixes = Counter(m.split("_")[0] for m in modules if "_" in m)
        crowded = {p: n for p, n in prefixes.items() if n >= 3}
        assert crowded == {}, f"{folder.relative_to(PACKAGE)}: {crowded}"
