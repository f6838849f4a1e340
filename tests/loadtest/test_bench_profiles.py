"""py-spy profiles of a node: raw samples ranked by self and total samples."""

from __future__ import annotations

import psutil

from loadtest.bench import profiles
from tests.loadtest.processes import process_tree

RAW_PROFILE = """\
thread (101): chronos-firing;Thread._bootstrap (threading.py:1002);FiringLoop.run (chronos/firing/loop.py:200);PostgresStore.claim (chronos/store/postgres/store.py:300);decode_headers (chronos/protocol.py:90) 30
thread (101): chronos-firing;Thread._bootstrap (threading.py:1002);FiringLoop.run (chronos/firing/loop.py:200);PostgresStore.claim (chronos/store/postgres/store.py:301) 10
thread (102): chronos-dispatcher;Thread._bootstrap (threading.py:1002);Dispatcher.run (chronos/firing/loop.py:122);KafkaPublisher.produce (chronos/kafka/clients.py:111) 40
thread (103): chronos-intake;Thread._bootstrap (threading.py:1002);f (/x/lib/python3.11/site-packages/psycopg/cursor.py:10);f (/x/lib/python3.11/site-packages/psycopg/cursor.py:12) 20
"""  # noqa: E501


def test_aggregate_profile() -> None:
    profile = profiles.aggregate_profile(RAW_PROFILE)
    prof = profile.as_dict()
    assert prof["samples"] == 100
    selfs = {i["function"]: i["samples"] for i in prof["self"]}
    assert selfs == {
        "decode_headers (chronos/protocol.py)": 30,
        "PostgresStore.claim (chronos/store/postgres/store.py)": 10,
        "KafkaPublisher.produce (chronos/kafka/clients.py)": 40,
        "f (psycopg/cursor.py)": 20,
    }
    totals = {i["function"]: i["samples"] for i in prof["total"]}
    assert totals["PostgresStore.claim (chronos/store/postgres/store.py)"] == 40
    assert totals["Thread._bootstrap (threading.py)"] == 100
    assert totals["f (psycopg/cursor.py)"] == 20  # recursion counted once
    assert prof["self"][0] == {
        "function": "KafkaPublisher.produce (chronos/kafka/clients.py)",
        "samples": 40,
        "percent": 40.0,
    }
    assert prof["threads"]["thread (101): chronos-firing"] == 40
    text = profiles.profile_text(profile)
    assert "decode_headers (chronos/protocol.py)" in text and text.startswith("100 samples")


def test_the_intake_process_of_a_node_is_found() -> None:
    intake = "import time; time.sleep(30)"
    spawn = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {intake!r}, 'chronos.intake.child'])\n"
        f"subprocess.Popen([sys.executable, '-c', {intake!r}, 'another'])\n"
        "time.sleep(30)\n"
    )
    with process_tree(spawn, children=2) as node:
        pid = profiles.intake_pid(node)
        assert pid is not None
        assert "chronos.intake.child" in psutil.Process(pid).cmdline()
    assert profiles.intake_pid(node) is None
