"""The admin API against its OpenAPI spec on the real Postgres: the served spec is the shipped
file, and generated requests (schemathesis) get the answers the spec promises."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

import chronos.admin
from chronos.admin.messages.filters import FILTER_PARAMS
from tests.integration.admin_api import (
    TOKEN,
    Api,
    seed_states,
    serve,
)
from tests.support import DatabaseFactory
from tests.support.kafka import delete_topics, new_topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fuzzed_api(database_factory: DatabaseFactory, kafka_bootstrap: str) -> Iterator[Api]:
    """One server for every generated case, on a database seeded with every state and the real
    broker (an empty dead-letter topic of two partitions)."""
    url = database_factory.create_migrated()
    topics = new_topics(kafka_bootstrap, "fuzz", 2)
    api = serve(
        url,
        application_name="chronos-admin-fuzz",
        kafka_bootstrap_servers=kafka_bootstrap,
        input_topic=topics.input,
        output_topic=topics.output,
        dead_letter_topic=topics.dead_letter,
    )
    seed_states(api)
    api.store.heartbeat(api.settings.node_id, hostname="fuzz", version="1")
    assert eventually(lambda: api.get("/admin/v1/dead-letters")[0] == 200, timeout=30, every=0.5)
    try:
        yield api
    finally:
        api.close()
        database_factory.drop(url)
        delete_topics(kafka_bootstrap, topics)


# The spec as shipped (the served copy is the same bytes: see the test below). Loading it from
# the file rather than the server lets the cases be generated before any fixture runs.
SPEC_FILE = Path(chronos.admin.__file__).parent / "openapi.json"
schema = schemathesis.openapi.from_path(SPEC_FILE)


def test_the_served_spec_is_the_shipped_file(api: Api) -> None:
    req = urllib.request.Request(api.url + "/admin/v1/openapi.json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == SPEC_FILE.read_bytes()


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_conforms_to_its_spec(case: Any, fuzzed_api: Api) -> None:
    excluded = []
    if "cursor" in (case.query or {}):
        # A cursor is opaque: the spec cannot say which strings are valid ones, and any other
        # string is rightly refused with 400.
        excluded.append(positive_data_acceptance)
    query = case.query or {}
    body = case.body if isinstance(case.body, dict) else {}
    if (
        "resume" in query
        or "resume" in body
        or (
            # What the spec cannot state: how parameters depend on each other (a key_prefix needs a
            # key, key and key_base64 exclude each other, a bulk action needs a filter, a pause or a
            # limit names exactly one of a tenant and a topic).
            ("key_prefix" in query and not {"key", "key_base64"} & set(query))
            or {"key", "key_base64"} <= set(query)
            or (
                case.path.startswith("/admin/v1/bulk/")
                and not set(query) & (FILTER_PARAMS - {"state", "key_prefix"})
            )
            or (
                case.path == "/admin/v1/bulk/reschedule"
                and query.get("state") not in (None, "waiting")
            )
            or (
                case.path in ("/admin/v1/pauses", "/admin/v1/limits")
                and case.method in ("POST", "DELETE")
                and len({"tenant", "topic"} & set(query)) != 1
            )
        )
    ):
        excluded.append(positive_data_acceptance)
    if any(value is None for value in (case.query or {}).values()):
        # The HTTP client leaves a query parameter whose value is None out of the request, so
        # the request sent is not the schema-violating one generated (an unknown parameter
        # with no value is sent as nothing): it cannot be expected to be refused.
        excluded.append(negative_data_rejection)
    case.call_and_validate(
        base_url=fuzzed_api.url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        excluded_checks=excluded,
        timeout=10,
    )
