"""A record that arrives already due, on the real broker and Postgres: intake publishes it directly
(it is never stored), and ``admin get`` finds it fired at the very partition and offset of the
output record, instead of answering 404."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chronos.store.history import FIRED
from tests.integration.admin_api import Api
from tests.integration.nodes import Nodes, chronos_record, now, produce, read, rows
from tests.support import Topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


def test_a_record_due_on_arrival_is_found_fired_at_its_output_record(
    nodes: Nodes, api: Api, kafka_bootstrap: str, topics: Topics
) -> None:
    api.store.maintain_history(timedelta(days=7))  # the leader's days, ahead of its first round
    node = nodes.start()
    due = chronos_record("due", now() - timedelta(seconds=5), key=b"order-42")
    produce(kafka_bootstrap, topics.input, [due])
    (out,) = read(kafka_bootstrap, topics.output, topics.partitions, 1)

    assert eventually(lambda: api.get("/admin/v1/messages/due")[0] == 200, timeout=20)
    status, body = api.get("/admin/v1/messages/due")
    assert status == 200 and body["state"] == FIRED and len(body["history"]) == 1
    assert (body["topic"], body["partition"], body["offset"]) == (
        topics.output,
        out.partition(),
        out.offset(),
    )
    assert body["node"] == node.settings.node_id and body["attempt"] == 1
    assert 5_000 <= body["lateness_ms"] < 60_000
    assert rows(nodes.database_url) == []  # never stored
    status, page = api.get("/admin/v1/messages?state=fired&key=order-42")
    assert status == 200 and [m["id"] for m in page["messages"]] == ["due"]
    assert page["messages"][0]["key_text"] == "order-42"
