"""A Chronos node: starts, supervises and stops the three loops; signals; graceful drain.

The loops share only the Store, their publishers and the settings. Firing and recovery are
threads of this process; intake runs in a child process of its own (``chronos.intake.process``:
consuming never holds the interpreter lock the firing timers wait for), or as a thread when
``CHRONOS_INTAKE_PROCESS=thread`` or when a test injects a store, publishers or a consumer.

If one loop dies unexpectedly (the intake process included) the node stops the others and exits
non-zero (the orchestrator restarts it); on SIGTERM/SIGINT it stops consuming (intake commits its
offsets) and claiming, gives back the rows it has not fired, waits for delivery reports, deletes
what was delivered, and exits 0 within the shutdown timeout.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from chronos import __version__, kafka
from chronos.cluster.leadership import Leadership
from chronos.cluster.monitor import Monitor
from chronos.cluster.recovery import RecoveryLoop
from chronos.config.settings import OPTIONS_BY_NAME, Settings
from chronos.config.shards import ShardMap, record_mismatch
from chronos.errors import BrokerUnreachableError, ConfigError, StoreError, TopicMissingError
from chronos.firing.loop import FiringLoop
from chronos.intake.loop import IntakeLoop
from chronos.intake.process import IntakeProcess
from chronos.kafka.probe import BrokerProbe
from chronos.node.lanes import Lane
from chronos.observability import metrics
from chronos.observability.dependencies import KAFKA, POSTGRES
from chronos.observability.relay import MergedRegistry, expose_process
from chronos.observability.tenants import TenantGauges
from chronos.runtime.loop import Backoff, Loop
from chronos.runtime.signals import relay_signals
from chronos.store import PostgresStore, Store
from chronos.store.fanout import ShardedStore
from chronos.store.shards import open_stores, shard_layout

log = logging.getLogger(__name__)

SWITCH_INTERVAL = 0.001
START_BACKOFF_CAP_S = 5.0  # longest wait between two start-up attempts on a dependency


@dataclass
class NodeState:
    """What the HTTP endpoints may read about the node."""

    node_id: str
    started_at: float = field(default_factory=time.time)
    stopping: bool = False
    # While start-up waits for a dependency: what it waits for ("" once the loops run).
    waiting_for: str = ""
    loops: dict[str, tuple[Loop, threading.Thread]] = field(default_factory=dict)
    liveness_timeout_s: float = 30.0
    # What /metrics serves: this process's metrics and the intake process's.
    registry: MergedRegistry = field(default_factory=MergedRegistry)

    def loops_alive(self) -> bool:
        return bool(self.loops) and all(t.is_alive() for _, t in self.loops.values())

    def warming_loops(self) -> list[str]:
        """Loops not yet warm (``Loop.warm``): readiness waits for them, liveness does not."""
        return [name for name, (loop, _) in self.loops.items() if not loop.warm.is_set()]

    def stalled_loops(self) -> list[str]:
        """Loops that made no progress within the liveness timeout (stuck in one call)."""
        now = time.monotonic()
        return [
            name
            for name, (loop, _) in self.loops.items()
            if now - loop.progress_at() > self.liveness_timeout_s
        ]


class Node:
    def __init__(
        self,
        settings: Settings,
        store: Store | None = None,
        publisher_factory: Callable[[str], kafka.Publisher] | None = None,
        consumer_factory: Callable[..., Any] | None = None,
    ):
        self.settings = settings
        self.separate_intake = settings.intake_process == "separate" and (
            store is None and publisher_factory is None and consumer_factory is None
        )
        # One lane per shard (docs/shards.md): its store, its leader election and monitor, its
        # firing and recovery loops. A test's injected store is one shard.
        stores: list[Store] = [store] if store is not None else list(open_stores(settings))
        self.shard_map = ShardMap(1) if store is not None else shard_layout(settings)[1]
        self.lanes: list[Lane] = []
        gauges = TenantGauges(settings.tenant_metrics_top)  # every shard's tenants, added up
        for shard, each in enumerate(stores):
            leadership = Leadership(settings.node_id, settings.liveness_window_ms)
            monitor = Monitor(settings, each, leadership, shard=shard, tenant_gauges=gauges)
            self.lanes.append(Lane(shard, each, leadership, monitor))
        self.store = stores[0]  # intake's database clock; with one shard, the admin API's too
        # The admin API and health over every shard (one: the store itself).
        self.admin_store: Store = (
            stores[0] if len(stores) == 1 else cast(Store, ShardedStore(stores))
        )
        if isinstance(self.store, PostgresStore):
            metrics.RUNNING_STATEMENT_AGE.set_function(self.store.longest_running_s)
        self._publisher_factory = publisher_factory or (
            lambda purpose: kafka.make_publisher(settings, purpose)
        )
        self._consumer_factory = consumer_factory or (
            lambda **cb: kafka.make_consumer(settings, **cb)
        )
        self.state = NodeState(
            settings.node_id, liveness_timeout_s=settings.liveness_timeout_ms / 1000
        )
        self._stop = threading.Event()
        self._loops_lock = threading.Lock()  # the loops a shard joining late adds
        self._failed: list[str] = []
        self.http: Any = None
        self.broker_probe: BrokerProbe | None = None

    @property
    def leadership(self) -> Leadership:
        """Shard 0's lease and election (the only one with one shard)."""
        return self.lanes[0].leadership

    @property
    def monitor(self) -> Monitor:
        """Shard 0's heartbeat and election (the only one with one shard)."""
        return self.lanes[0].monitor

    @property
    def claims_since(self) -> datetime | None:
        """Shard 0's claim fence: this process's start on its database clock."""
        return self.lanes[0].claims_since

    # -- lifecycle -----------------------------------------------------------------------------

    def build_loops(self) -> list[Loop]:
        intake: Loop = (
            IntakeProcess(self.settings, self.state.registry)
            if self.separate_intake
            else IntakeLoop(
                self.settings,
                self.store,
                self._publisher_factory("intake"),
                self._consumer_factory,
                shards=[lane.store for lane in self.lanes],
                shard_map=self.shard_map,
            )
        )
        loops = [intake]
        for lane in self.lanes:
            if lane.claims_since is not None:  # registered: a shard away at start joins later
                loops += self._lane_loops(lane)
        return loops

    def _lane_loops(self, lane: Lane) -> list[Loop]:
        """A registered lane's firing and recovery loops."""
        firing = FiringLoop(
            self.settings,
            lane.store,
            self._publisher_factory("firing"),
            lane.leadership,
            claims_since=lane.claims_since,
            shards=len(self.lanes),
        )
        recovery = RecoveryLoop(
            self.settings, lane.store, lane.leadership, claims_since=lane.claims_since
        )
        if len(self.lanes) > 1:  # firing-0, recovery-0, firing-1, ...
            firing.name, recovery.name = f"firing-{lane.shard}", f"recovery-{lane.shard}"
        return [firing, recovery]

    def _start_loops(self, loops: list[Loop], monitor: Monitor | None = None) -> bool:
        """Start ``loops`` on threads of their own (and ``monitor``); False (none started)
        once the node is stopping."""
        with self._loops_lock:
            if self.state.stopping:
                return False
            if monitor is not None:
                monitor.start()
            threads = []
            for loop in loops:
                thread = threading.Thread(
                    target=self._run_loop, args=(loop,), name=f"chronos-{loop.name}", daemon=True
                )
                self.state.loops[loop.name] = (loop, thread)
                threads.append(thread)
            for thread in threads:
                thread.start()
        return True

    def start(self, *, check_broker: bool = False) -> bool:
        """Listen, wait for the dependencies (the broker's topics when ``check_broker``, then
        Postgres, each with capped back-off: one that is away is waited for, never a reason to
        exit), register, and start the loops. False if a stop was asked for meanwhile."""
        # Hand the GIL over sooner (default 5 ms): the dispatcher's timers wait for it, behind
        # the claim loop's decoding (and intake's batches when intake is a thread).
        sys.setswitchinterval(SWITCH_INTERVAL)
        log.info(
            "chronos node %s starting (input %s -> output %s, advance %d ms, hold %d ms)",
            self.settings.node_id,
            self.settings.input_topic,
            self.settings.output_topic,
            self.settings.timing_advance_ms,
            self.settings.hold_time_ms,
            extra={"event": "node_starting", "node": self.settings.node_id},
        )
        if self.settings.http_port:
            self.http = self._listen()  # first: a port in use must stop start-up, not a node
        if check_broker and not self._await("Kafka", lambda: kafka.check_topics(self.settings)):
            return False
        if not self._await("Postgres", self.register):
            return False
        self.state.waiting_for = ""
        self.broker_probe = BrokerProbe(self.settings) if check_broker else None
        if self.broker_probe is not None:
            self.broker_probe.start()
        self._start_loops(self.build_loops())
        late = [lane for lane in self.lanes if lane.claims_since is None]
        for lane in self.lanes:
            if lane.claims_since is not None:
                lane.monitor.start()
        if late:
            threading.Thread(
                target=self._join_late, args=(late,), name="chronos-late-shards", daemon=True
            ).start()
        log.info(
            "chronos node %s started",
            self.settings.node_id,
            extra={"event": "node_started", "node": self.settings.node_id},
        )
        return True

    def _await(self, what: str, attempt: Callable[[], object]) -> bool:
        """Run ``attempt`` until it stops failing for the dependency's absence (the broker
        unreachable, a topic not there yet or not allowed to this node, Postgres away), with
        capped back-off; False if stopped meanwhile. The outage is logged by
        ``chronos.observability.dependencies``, once, then once a minute; readiness says what
        is waited for."""
        dependency = KAFKA if what == "Kafka" else POSTGRES
        self.state.waiting_for = what
        backoff = Backoff(initial=0.5, cap=START_BACKOFF_CAP_S)
        while not self._stop.is_set():
            try:
                attempt()
            except BrokerUnreachableError as exc:
                self.state.waiting_for = what
                dependency.failed(exc)
            except TopicMissingError as exc:  # created (or allowed) later: start then
                self.state.waiting_for = f"{what}: {exc}"
                dependency.failed(exc)
            except StoreError as exc:
                if not exc.outage:  # credentials, database name, TLS, schema: the operator's
                    raise ConfigError(
                        f"the database refused this node (CHRONOS_DATABASE_URL): {exc}"
                    ) from None
            else:
                dependency.succeeded()
                return True
            self._stop.wait(backoff.next_delay())
        return False

    def _listen(self) -> Any:
        from chronos.node.http import ListenError, start_http_server

        try:
            return start_http_server(
                self.settings, self.state, self.admin_store, registry=self.state.registry
            )
        except ListenError as exc:
            flag = OPTIONS_BY_NAME[exc.setting.removeprefix("CHRONOS_").lower()].flag
            zero = (
                "0 to serve the admin API on the HTTP port"
                if exc.setting == "CHRONOS_ADMIN_PORT"
                else "0 to run without the HTTP server"
            )
            raise ConfigError(
                f"{exc.setting} / {flag}: cannot listen on {exc.host}:{exc.port} "
                f"({exc.strerror or exc}); another process (a second node on this host?) may be "
                f"using the port: choose another one with {exc.setting}, or {zero} "
                "(CHRONOS_HTTP_HOST chooses the address)"
            ) from None

    def register(self) -> None:
        """In every shard: check it is the shard the settings make it (``chronos_shard``), and
        take the node id in its chronos_nodes, refusing it while a live node holds it (two
        processes sharing an id would release and fence each other's claims). With several
        shards, one whose database is away is left for later (``_join_late``): the node starts
        once one answers."""
        away: StoreError | None = None
        for lane in self.lanes:
            if lane.claims_since is not None:
                continue  # registered in this shard by an earlier attempt
            try:
                self._register(lane)
            except StoreError as exc:
                if not exc.outage or len(self.lanes) == 1:
                    raise
                away = away or exc
        if away is not None and all(lane.claims_since is None for lane in self.lanes):
            raise away

    def _join_late(self, lanes: list[Lane]) -> None:
        """The shards away at start: registered, and their loops and monitor started, as each
        database answers (capped back-off). A database that turns out to be another shard, or
        to refuse this node, stops the node as it would have at start."""
        backoff = Backoff(initial=0.5, cap=START_BACKOFF_CAP_S)
        pending = list(lanes)
        while pending and not self._stop.is_set():
            for lane in list(pending):
                try:
                    self._register(lane)
                except StoreError as exc:
                    if exc.outage:
                        continue
                    self._fail_lane(lane, f"the database refused this node: {exc}")
                    return
                except ConfigError as exc:
                    self._fail_lane(lane, str(exc))
                    return
                started = self._start_loops(self._lane_loops(lane), lane.monitor)
                if self._stop.is_set() or not started:
                    return
                pending.remove(lane)
                log.warning(
                    "shard %d's database answers: this node fires its messages from now on",
                    lane.shard,
                    extra={"event": "shard_joined", "shard": lane.shard},
                )
            self._stop.wait(backoff.next_delay())

    def _fail_lane(self, lane: Lane, why: str) -> None:
        log.critical(
            "shard %d: %s", lane.shard, why, extra={"event": "shard_refused", "shard": lane.shard}
        )
        self._failed.append(f"shard-{lane.shard}")
        self._stop.set()

    def _register(self, lane: Lane) -> None:
        """Register this node in ``lane``'s shard (its claim fence: ``lane.claims_since``)."""
        if isinstance(lane.store, PostgresStore):
            mismatch = record_mismatch(lane.store.shard_record(), lane.shard, self.shard_map)
            if mismatch is not None:
                raise ConfigError(mismatch)
        sent_at = lane.leadership.monotonic()
        sent_before, lane.registering = lane.registering, True
        lane.claims_since = lane.store.register_node(
            self.settings.node_id,
            self.settings.liveness_window_ms / 1000,
            hostname=lane.monitor.hostname,
            version=__version__,
        )
        if lane.claims_since is None and sent_before:
            # An earlier attempt's reply was lost with the database: the live row may be its
            # own. Waited out as an outage: the row expires within the liveness window.
            raise StoreError(
                f"shard {lane.shard}: this node's registration may be the live one; waiting "
                "for it to expire",
                outage=True,
            )
        if lane.claims_since is None:
            raise ConfigError(
                f"node id {self.settings.node_id} is held by a live node (heartbeat within "
                f"{self.settings.liveness_window_ms / 1000:.0f} s): give each node its own "
                "CHRONOS_NODE_ID / --node-id, or leave it unset for a random one"
            )
        lane.leadership.renew(sent_at)  # registering is this node's first heartbeat

    def _run_loop(self, loop: Loop) -> None:
        try:
            loop.run()
        except BaseException:
            log.exception("loop %s died", loop.name, extra={"event": "loop_died"})
            self._failed.append(loop.name)
        finally:
            if not loop.stopping.is_set():  # it ended without being asked to
                if loop.name not in self._failed:
                    self._failed.append(loop.name)
                self._stop.set()

    def request_stop(self, *_: Any) -> None:
        self._stop.set()

    def wait(self) -> int:
        """Block until a stop is requested or a loop dies; then shut down. Returns exit code."""
        while not self._stop.wait(0.5):
            pass
        return self.shutdown()

    def shutdown(self) -> int:
        with self._loops_lock:
            self.state.stopping = True
        log.info(
            "chronos node %s stopping", self.settings.node_id, extra={"event": "node_stopping"}
        )
        deadline = time.monotonic() + self.settings.shutdown_timeout_ms / 1000
        if self.broker_probe is not None:
            self.broker_probe.stop()
        for lane in self.lanes:  # leave the live nodes first (deletes the heartbeat rows)
            lane.monitor.stop()
        # Intake first (no new direct publishes), then firing (drains), then recovery.
        order = {"intake": 0, "firing": 1, "recovery": 2}
        for name in sorted(self.state.loops, key=lambda n: order.get(n.split("-")[0], 3)):
            loop, thread = self.state.loops[name]
            loop.stop()
            thread.join(max(0.1, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("loop %s did not stop within the shutdown timeout", name)
                self._failed.append(name)
        if self.http is not None:
            self.http.shutdown()
        for lane in self.lanes:
            lane.store.close()
        if self._failed:
            log.error(
                "chronos node %s stopped after failure of %s",
                self.settings.node_id,
                ", ".join(sorted(set(self._failed))),
            )
            return 1
        log.info("chronos node %s stopped", self.settings.node_id, extra={"event": "node_stopped"})
        return 0


def run_node(settings: Settings) -> int:
    """``chronos run``: start the node once its topics and its database answer (waiting for
    them as long as it takes), handle signals, drain, exit."""
    node = Node(settings)
    expose_process("node")

    def on_signal(sig: signal.Signals) -> None:
        log.info("received %s", sig.name)
        node.request_stop()

    relay_signals(on_signal)  # on a thread of its own: a handler must take no lock
    # What start-up imported and built lives as long as the process: out of the collector's
    # reach, a full collection no longer walks it. Each full collection held the GIL 34-68 ms
    # (a node at 1,000 msg/s while ingesting 9,000: two in a 100-second run), and every timer
    # due meanwhile fired late; frozen, none took over 3 ms (docs/benchmark-results.md).
    gc.collect()
    gc.freeze()
    if not node.start(check_broker=True):
        return node.shutdown()  # stopped while waiting for a dependency
    return node.wait()
