"""One Apache Kafka node that a test can cut off from one client while the others go on: a
network partition of a single Chronos node from the brokers, without root or firewall rules.

The node has a second client listener (``PROXIED``) whose advertised address is a
:class:`~tests.support.proxy.BlackHoleProxy` in front of it. A client bootstrapped through the
proxy gets that address back in every metadata answer, so all its broker traffic (metadata,
produce, fetch, the group coordinator) goes through the proxy; a client bootstrapped on the
node's own listener never touches it. ``cut()`` freezes the proxy: it forwards nothing either
way and closes nothing, and new connections are accepted and never answered — what a dropped
route looks like to both ends. ``heal()`` forwards again: what the client wrote into a
connection meanwhile (a produce it has since given up on) reaches the broker then, as TCP's
retransmissions would deliver it once the route is back.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from chronos.embedded import free_port
from chronos.embedded.kafka.broker import EmbeddedKafka
from chronos.embedded.kafka.config import BROKER_LISTENER, CONTROLLER_LISTENER
from tests.support.proxy import BlackHoleProxy

PROXIED_LISTENER = "PROXIED"


class PartitionableBroker:
    """One Kafka node (``direct``: its own listener) reachable through a proxy too
    (``proxied``); ``extra``: further server properties."""

    def __init__(self, log_dir: Path, extra: dict[str, str] | None = None) -> None:
        host = "127.0.0.1"
        port, controller, proxied = free_port(host), free_port(host), free_port(host)
        self.proxy = BlackHoleProxy((host, proxied))
        self.node = EmbeddedKafka(port, host=host, log_dir=log_dir, controller_port=controller)
        self.node.extra = {
            "listeners": (
                f"{BROKER_LISTENER}://{host}:{port},{CONTROLLER_LISTENER}://{host}:{controller},"
                f"{PROXIED_LISTENER}://{host}:{proxied}"
            ),
            "advertised.listeners": (
                f"{BROKER_LISTENER}://{host}:{port},{PROXIED_LISTENER}://{host}:{self.proxy.port}"
            ),
            "listener.security.protocol.map": (
                f"{BROKER_LISTENER}:PLAINTEXT,{CONTROLLER_LISTENER}:PLAINTEXT,"
                f"{PROXIED_LISTENER}:PLAINTEXT"
            ),
            **(extra or {}),
        }

    @property
    def direct(self) -> str:
        """The bootstrap address that never goes through the proxy."""
        return self.node.bootstrap

    @property
    def proxied(self) -> str:
        """The bootstrap address whose clients' every connection goes through the proxy."""
        return f"127.0.0.1:{self.proxy.port}"

    def start(self, timeout: float = 120.0) -> PartitionableBroker:
        self.node.start(timeout)
        return self

    def cut(self) -> None:
        """Black-hole every connection through the proxy (both ways), present and new."""
        self.proxy.pause()

    def heal(self) -> None:
        """Forward again, what was written meanwhile included."""
        self.proxy.resume()

    def stop(self) -> None:
        self.proxy.close()
        self.node.stop()

    def __enter__(self) -> PartitionableBroker:
        return self.start()

    def __exit__(
        self,
        _t: type[BaseException] | None,
        _e: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.stop()
