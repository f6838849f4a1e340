"""``python -m tests.support.checker [DIR]``: the fault-suite table of docs/benchmark-results.md
from the result files in DIR (default ``.chronos/reliability``)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.checker.results import render_table

print(render_table(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
