"""CHRONOS_KAFKA_OAUTH_PROVIDER: OAUTHBEARER tokens for every Kafka client from AWS MSK IAM's
signer or a callable of the user's, and a clear start-up error naming the setting when it cannot
be had. The signer package is replaced by a stand-in module: no AWS account here."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from chronos.errors import ConfigError
from chronos.kafka import config as clients
from tests.unit.helpers import settings


def token_for_tests(config: str) -> tuple[str, float]:
    return f"token({config})", 2_000_000_000.0


@pytest.fixture
def fake_signer(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    regions: list[str] = []

    class MSKAuthTokenProvider:
        @staticmethod
        def generate_auth_token(region: str) -> tuple[str, int]:
            regions.append(region)
            return "msk-token", 1_900_000_000_000

    module = types.ModuleType("aws_msk_iam_sasl_signer")
    module.MSKAuthTokenProvider = MSKAuthTokenProvider  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", module)
    yield regions


def test_every_client_gets_the_aws_msk_iam_token(
    fake_signer: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    config = settings(kafka_oauth_provider="aws-msk-iam")
    for built in (
        clients.admin_config(config),
        clients.producer_config(config, "firing"),
        clients.consumer_config(config),
        clients.import_producer_config(config),
        clients.tail_consumer_config(config, "g"),
    ):
        assert built["oauth_cb"]("") == ("msk-token", 1_900_000_000.0)  # expiry in seconds
    assert set(fake_signer) == {"eu-west-1"}


def test_a_callable_of_the_user_is_called_with_the_oauthbearer_config() -> None:
    config = settings(
        kafka_oauth_provider=f"{__name__}:token_for_tests",
        kafka_properties={"sasl.oauthbearer.config": "scope=kafka"},
    )
    callback = clients.admin_config(config)["oauth_cb"]
    assert callback("scope=kafka") == ("token(scope=kafka)", 2_000_000_000.0)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("aws-msk-iam", "pip install aws-msk-iam-sasl-signer-python"),
        ("no-colon", "'module:function'"),
        ("chronos_no_such_module:token", "cannot import"),
        (f"{__name__}:missing", "no callable"),
    ],
)
def test_a_provider_that_cannot_be_had_stops_start_up_naming_the_setting(
    spec: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)  # not installed
    with pytest.raises(ConfigError, match="CHRONOS_KAFKA_OAUTH_PROVIDER") as raised:
        clients.admin_config(settings(kafka_oauth_provider=spec))
    assert words in str(raised.value)


def test_aws_msk_iam_without_a_region_is_refused(
    fake_signer: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(ConfigError, match="AWS_REGION"):
        clients.admin_config(settings(kafka_oauth_provider="aws-msk-iam"))
