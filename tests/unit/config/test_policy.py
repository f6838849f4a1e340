"""The expiry limit the firing loop and intake share: a message's own chronosExpires, else
CHRONOS_MAX_LATENESS_MS, else none; and the words the dead-letter reason names it with."""

from __future__ import annotations

import pytest

from chronos.config.policy import expiry_limit_ms, expiry_limit_text
from tests.unit.helpers import settings


def test_without_a_limit_nothing_expires() -> None:
    assert expiry_limit_ms(None, settings()) is None  # CHRONOS_MAX_LATENESS_MS=0: off


def test_the_setting_limits_a_message_without_its_own_expiry() -> None:
    s = settings(max_lateness_ms=60_000)
    assert expiry_limit_ms(None, s) == 60_000
    assert expiry_limit_text(None, s) == "CHRONOS_MAX_LATENESS_MS (60000 ms)"


@pytest.mark.parametrize("max_lateness_ms", [0, 3_600_000])
def test_a_message_s_own_expiry_wins_over_the_setting(max_lateness_ms: int) -> None:
    s = settings(max_lateness_ms=max_lateness_ms)
    assert expiry_limit_ms(10_000, s) == 10_000
    assert expiry_limit_text(10_000, s) == "its chronosExpires (10000 ms)"


def test_an_own_expiry_of_zero_is_a_limit_not_off() -> None:
    assert expiry_limit_ms(0, settings(max_lateness_ms=60_000)) == 0
