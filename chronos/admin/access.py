"""Who may use the admin API: the bearer tokens (``CHRONOS_ADMIN_TOKEN`` reads and writes,
``CHRONOS_ADMIN_READ_TOKEN`` only reads), checked in constant time; the caller's name is what the
log of every write names."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from chronos.admin.params import ApiError
from chronos.config.settings import Settings

ADMIN = "admin"  # the token's name in the logs: CHRONOS_ADMIN_TOKEN
READ_ONLY = "read-only"  # CHRONOS_ADMIN_READ_TOKEN


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: the name of its token and whether it may write."""

    token_name: str
    can_write: bool

    def require_write(self, method: str, path: str) -> None:
        if not self.can_write:
            raise ApiError(
                403,
                f"{method} {path} changes messages: the {self.token_name} token can only read "
                "(use CHRONOS_ADMIN_TOKEN)",
            )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _same(token: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(
        token.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


class Tokens:
    """The configured tokens (an empty one is off: it matches nothing)."""

    def __init__(self, admin: str, read_only: str = "") -> None:
        self.admin = admin
        self.read_only = read_only

    @classmethod
    def of(cls, settings: Settings) -> Tokens:
        admin, reader = settings.admin_token, settings.admin_read_token
        return cls(admin.reveal() if admin else "", reader.reveal() if reader else "")

    @property
    def enabled(self) -> bool:
        return bool(self.admin or self.read_only)

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller the header's token names; 401 for none or an unknown one (both tokens
        are compared, whatever matches first, so the time taken tells nothing)."""
        token = bearer_token(authorization)
        if token is None:
            raise ApiError(
                401,
                "missing bearer token: send Authorization: Bearer <CHRONOS_ADMIN_TOKEN>",
                {"WWW-Authenticate": 'Bearer realm="chronos-admin"'},
            )
        is_admin = _same(token, self.admin)
        is_reader = _same(token, self.read_only)
        if is_admin:
            return Caller(ADMIN, True)
        if is_reader:
            return Caller(READ_ONLY, False)
        raise ApiError(
            401,
            "invalid bearer token",
            {"WWW-Authenticate": 'Bearer realm="chronos-admin", error="invalid_token"'},
        )


def check_auth(authorization: str | None, expected: str) -> None:
    """Raise 401 unless the header carries ``expected`` (compared in constant time)."""
    Tokens(expected).authenticate(authorization)
