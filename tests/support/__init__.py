"""Helpers shared by the test tiers: real services, throwaway databases and topics.

The fixtures in ``tests/conftest.py`` are the way in; import from here only for the helpers
(``consumer_config``, ``make_settings``, ``Topics``...).
"""

from __future__ import annotations

from tests.support.databases import DatabaseFactory
from tests.support.kafka import Topics, consume, consumer_config
from tests.support.services import in_ci, unavailable
from tests.support.settings import make_settings

__all__ = [
    "DatabaseFactory",
    "Topics",
    "consume",
    "consumer_config",
    "in_ci",
    "make_settings",
    "unavailable",
]
