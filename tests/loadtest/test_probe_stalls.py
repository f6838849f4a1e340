"""The stall probe (loadtest.probes.stalls): a Chronos-named process started with the hook on its
``PYTHONPATH`` writes its stalls, and the analysis names the thread that held the interpreter
lock; a process that is not Chronos's, or started without the variable, writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadtest.probes.stalls import read, report, role_of, running_threads

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "loadtest" / "probes" / "stall_site"

# A process named like a node ("-c ... chronos"): one thread spins in pure Python for a second,
# holding the lock but for the interpreter's switch interval, which it stretches to 50 ms.
HOG = """
import sys, threading, time
sys.setswitchinterval(0.05)
def hog():
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        sum(range(2000))
t = threading.Thread(target=hog, name="hog")
time.sleep(0.2)
t.start(); t.join()
"""


def _run(tmp_path: Path, name: str, probe: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(SITE)}
    if probe:
        env["LOADTEST_STALL_PROBE"] = str(tmp_path)
    subprocess.run([sys.executable, "-c", HOG, name], env=env, check=True, timeout=30)


def test_a_thread_holding_the_lock_is_named(tmp_path: Path) -> None:
    _run(tmp_path, "chronos", probe=True)
    files = list(tmp_path.glob("stalls-*.jsonl"))
    assert len(files) == 1
    stalls = read(files[0])
    assert stalls is not None and stalls.role == "node"
    # the probe's 2-ms sleeps wait up to the 50-ms switch interval while the hog runs
    assert len(stalls.gaps_ms) >= 5 and max(stalls.gaps_ms) >= 30, stalls.gaps_ms
    heaviest = max(stalls.running, key=lambda name: stalls.running[name])
    assert heaviest.startswith("hog @ "), stalls.running
    assert "hog @ " in report(tmp_path)


def test_nothing_is_written_without_the_variable_or_for_another_program(tmp_path: Path) -> None:
    _run(tmp_path, "chronos", probe=False)
    _run(tmp_path, "something-else", probe=True)
    assert list(tmp_path.glob("stalls-*.jsonl")) == []


def test_roles_and_waiting_threads() -> None:
    assert role_of(["python", "-m", "chronos.intake.child", "7", "42"]) == "intake"
    assert role_of(["python", "-m", "chronos", "run"]) == "node"
    assert role_of(["java", "kafka.Kafka"]) == "other"
    stacks = {
        "chronos-dispatcher": ["threading.py:331:wait"],
        "chronos-firing": ["session.py:189:run", "array.py:58:_find_list_element"],
        "stall-probe": ["sitecustomize.py:40:_watch"],
        "idle": [],
    }
    assert running_threads(stacks) == ["chronos-firing @ array.py:58:_find_list_element"]


def test_the_switch_interval_is_set_again_after_the_process_set_its_own(tmp_path: Path) -> None:
    """What a comparison of switch intervals relies on: the hook's interval wins over one the
    process sets at start-up."""
    program = (
        "import sys, time; sys.setswitchinterval(0.001); a = sys.getswitchinterval(); "
        "time.sleep(3.5); print(a, round(sys.getswitchinterval(), 6))"
    )
    env = {**os.environ, "PYTHONPATH": str(SITE), "LOADTEST_SWITCH_INTERVAL_MS": "7"}
    done = subprocess.run(
        [sys.executable, "-c", program, "chronos"], env=env, capture_output=True, text=True,
        check=True, timeout=30,
    )  # fmt: skip
    assert done.stdout.split() == ["0.001", "0.007"]
