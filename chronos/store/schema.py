"""The single source of the schema: SQLAlchemy Core metadata (alembic's target metadata).

Keys, values and header values are arbitrary bytes and round-trip byte-exact: key and value are
``bytea`` (NULL stays NULL: a tombstone stays a tombstone); headers are a JSON array of
single-entry objects ``[{"name": "<base64 value>" | null}, ...]`` preserving order and repeats.
"""

from __future__ import annotations

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    event,
    func,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData()

messages = Table(
    "chronos_messages",
    metadata,
    Column(
        "id", String(128), primary_key=True, comment="chronosMessageId: unique among waiting/ready"
    ),
    Column("deadline", DateTime(timezone=True), nullable=False, comment="when the message is due"),
    Column("readied_at", DateTime(timezone=True), nullable=True, comment="claim time (DB clock)"),
    Column("readied_by", UUID(as_uuid=False), nullable=True, comment="node that claimed it"),
    Column(
        "message_key", LargeBinary, nullable=True, comment="original key, byte-exact; NULL kept"
    ),
    Column("message_value", LargeBinary, nullable=True, comment="original value; NULL = tombstone"),
    Column("message_headers", JSONB, nullable=True, comment='[{"name": base64|null}, ...]'),
    Column(
        "attempts",
        SmallInteger,
        nullable=False,
        server_default=text("0"),
        comment="failed publish attempts so far",
    ),
    Column(
        "last_error",
        String(500),
        nullable=True,
        comment="the last publish error (shown in the dead-letter reason)",
    ),
    Column(
        "target_topic",
        String(249),
        nullable=True,
        comment="reserved: per-message output topic (NULL = the configured output topic)",
    ),
    Column(
        "tenant",
        String(128),
        nullable=True,
        server_default=text("''"),
        comment="tenant for fair claiming under overload (empty: the default tenant; NULL: "
        "written before tenants, claimed oldest first only)",
    ),
    Column(
        "parked_at",
        DateTime(timezone=True),
        nullable=True,
        comment="when the row was parked (never claimed until requeued); NULL: not parked",
    ),
    Column(
        "enqueued_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when the row was inserted (DB clock)",
    ),
    Column(
        "recurrence",
        Text,
        nullable=True,
        comment="a series' rule (JSON: every/cron, tz, until, missed); NULL: fires once",
    ),
    Column(
        "expires_ms",
        Integer,
        nullable=True,
        comment="chronosExpires: ms an occurrence may fire late (NULL: the default)",
    ),
    Column(
        "input_partition",
        Integer,
        nullable=True,
        comment="the input partition it was consumed from (NULL: not from Kafka)",
    ),
)

# "due and not readied": the claim query is an index range scan on deadline.
Index(
    "chronos_messages_due_idx",
    messages.c.deadline,
    postgresql_where=messages.c.readied_at.is_(None),
)
# "due, not readied and not parked": the index the claim walks, so parked rows (which stay in the
# due index above, kept for the previous release's claim during a rolling upgrade) cost it nothing.
Index(
    "chronos_messages_ready_idx",
    messages.c.deadline,
    postgresql_where=messages.c.readied_at.is_(None) & messages.c.parked_at.is_(None),
)
# "due, not readied and not parked, by tenant": the fair claim's probes of one tenant's oldest
# ready rows (chronos/store/postgres/sql/, claim_due_fair). Its predicate is the ready index's,
# written `coalesce(readied_at, parked_at) IS NULL` as the probes write it: the planner can prove
# it from the probes only, so the probes never walk the deadline ready index (filtering on the
# tenant) and the plain claim never walks this one, whatever the statistics.
Index(
    "chronos_messages_tenant_ready_idx",
    messages.c.tenant,
    messages.c.deadline,
    postgresql_where=text("coalesce(readied_at, parked_at) IS NULL"),
)
# "readied longer than the hold time": the failure detector is an index range scan on readied_at.
Index(
    "chronos_messages_claimed_idx",
    messages.c.readied_at,
    postgresql_where=messages.c.readied_at.isnot(None),
)
# "claimed by this node process": release_node at shutdown (fenced by the process's start).
Index(
    "chronos_messages_claimed_by_idx",
    messages.c.readied_by,
    messages.c.readied_at,
    postgresql_where=messages.c.readied_at.isnot(None),
)
# "failed at least once": rows a publish attempt failed for are rare, so the parked rows (attempts
# at the park threshold, never claimed again) are counted and listed through this small index.
Index(
    "chronos_messages_failed_idx",
    messages.c.deadline,
    messages.c.id,
    postgresql_where=messages.c.attempts > 0,
)

# The admin list's filters (chronos/store/postgres/sql/, find_messages): over the waiting rows
# only (the ready index's predicate, which the planner estimates from each column's statistics;
# the tenant index's coalesce form it estimates at 0.5 % of the rows, and would walk these
# indexes for any filter), so a claim or a park removes a row from them and a row costs them
# nothing while it is claimed. The tenant filter walks the tenant
# index above; these serve the target topic (rows with a topic of their own), the id prefix
# (text_pattern_ops: a LIKE prefix is a range whatever the collation), the key (its first 64
# bytes: an exact key or a prefix is a range of it) and the series.
READY = "readied_at IS NULL AND parked_at IS NULL"
Index(
    "chronos_messages_topic_ready_idx",
    messages.c.target_topic,
    messages.c.deadline,
    postgresql_where=text("target_topic IS NOT NULL AND readied_at IS NULL AND parked_at IS NULL"),
)
Index(
    "chronos_messages_id_ready_idx",
    messages.c.id,
    postgresql_ops={"id": "text_pattern_ops"},
    postgresql_where=text(READY),
)
Index(
    "chronos_messages_key_ready_idx",
    text("substring(message_key from 1 for 64)"),
    messages.c.deadline,
    postgresql_where=text(READY),
)
Index(
    "chronos_messages_recurring_ready_idx",
    messages.c.deadline,
    postgresql_where=text("recurrence IS NOT NULL AND readied_at IS NULL AND parked_at IS NULL"),
)

# One row per cancelled id, for CHRONOS_CANCEL_TTL_MS: a schedule of that id arriving later (another
# partition, a producer retry, a replay) is dropped. Purged in batches by the enqueue statement.
cancels = Table(
    "chronos_cancels",
    metadata,
    Column("id", String(128), primary_key=True, comment="chronosMessageId of a cancel"),
    Column(
        "expires_at",
        DateTime(timezone=True),
        nullable=False,
        comment="until when a schedule of this id is dropped (DB clock)",
    ),
)
Index("chronos_cancels_expires_idx", cancels.c.expires_at)

# One row: which shard this database is, of how many, and the map from input partition to shard
# (docs/shards.md), written by `chronos migrate` and compared by every node at start (0018; no
# row: one shard's, as before shards). Readable by PUBLIC: layout, no message data.
shard = Table(
    "chronos_shard",
    metadata,
    Column(
        "id", SmallInteger, primary_key=True, server_default=text("1"), comment="always 1: one row"
    ),
    Column("shard", Integer, nullable=False, comment="this database's shard"),
    Column("shards", Integer, nullable=False, comment="how many shards there are"),
    Column("map", Text, nullable=False, comment="input partition to shard (CHRONOS_SHARD_MAP)"),
    Column(
        "recorded_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when chronos migrate wrote it (DB clock)",
    ),
    CheckConstraint("id = 1", name="chronos_shard_one_row"),
)

# The input partitions moved away from the recorded map (0019, docs/shards.md), in every shard:
# the shard each goes to, "moving" (its rows being copied: no shard takes its messages) then
# "moved"; `generation` orders a move's writes. Readable by PUBLIC: layout, no message data.
partition_moves = Table(
    "chronos_partition_moves",
    metadata,
    Column("partition", Integer, primary_key=True, comment="the input partition"),
    Column("shard", Integer, nullable=False, comment="the shard it moves to"),
    Column("state", Text, nullable=False, comment="moving, then moved"),
    Column("generation", BigInteger, nullable=False, comment="orders the moves' writes"),
    Column(
        "changed_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when its state was written (DB clock)",
    ),
    CheckConstraint("state IN ('moving', 'moved')", name="chronos_partition_moves_state"),
)
MOVES_LOCK = 6372728131  # the moves' advisory lock: the fence's (below) and a move's
# The fence of an enqueue statement with several shards: the moves' lock shared (until the
# transaction ends; a move takes it exclusively to mark a partition moving), then, in a snapshot
# of its own, the partitions this shard must not take: moving, or moved to another shard.
PARTITION_FENCE = """
CREATE OR REPLACE FUNCTION chronos_partitions_refused() RETURNS int4[]
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(6372728131);
    RETURN coalesce(
        (SELECT array_agg(m.partition ORDER BY m.partition)
         FROM chronos_partition_moves m
         WHERE m.state = 'moving'
            OR m.shard IS DISTINCT FROM (SELECT s.shard FROM chronos_shard s WHERE s.id = 1)),
        '{}');
END
$$
"""
event.listen(partition_moves, "after_create", DDL(PARTITION_FENCE))  # type: ignore[no-untyped-call]

# One row per tenant ever named by a message (the default tenant '' from the start): the tenants
# the fair claim visits in turn. Written by the enqueue statement for the tenants a node has not
# written yet (ON CONFLICT DO NOTHING), so it stays as small as the number of tenants.
tenants = Table(
    "chronos_tenants",
    metadata,
    Column("tenant", String(128), primary_key=True, comment="a tenant ('': the default tenant)"),
)

# One row per paused tenant or target topic (a handful): the claim skips their rows (the node reads
# the set every second and passes it to the claim) until they are resumed.
pauses = Table(
    "chronos_pauses",
    metadata,
    Column("kind", String(16), primary_key=True, comment="'tenant' or 'topic'"),
    Column(
        "name",
        String(255),
        primary_key=True,
        comment="the tenant ('': the default tenant) or the target topic",
    ),
    Column(
        "paused_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when it was paused (DB clock)",
    ),
    Column("paused_by", String(255), nullable=False, comment="who paused it (the token's name)"),
)

# One row per rate-limited tenant or target topic: the nodes share each limit between them (read
# every second) and claim no more of its rows than their share allows.
limits = Table(
    "chronos_limits",
    metadata,
    Column("kind", String(16), primary_key=True, comment="'tenant' or 'topic'"),
    Column(
        "name",
        String(255),
        primary_key=True,
        comment="the tenant ('': the default tenant) or the target topic",
    ),
    Column("per_second", Integer, nullable=False, comment="messages per second, cluster-wide"),
    Column(
        "set_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when the limit was set (DB clock)",
    ),
    Column("set_by", String(255), nullable=False, comment="who set it (the token's name)"),
)

# One row per running node, written by its heartbeat every second and deleted at graceful
# shutdown: the live nodes of the admin API, and the basis of leader election (lowest live id).
nodes = Table(
    "chronos_nodes",
    metadata,
    Column("node_id", UUID(as_uuid=False), primary_key=True, comment="the node's UUID"),
    Column(
        "started_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when the node started",
    ),
    Column(
        "heartbeat_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="the node's last heartbeat (DB clock)",
    ),
    Column("hostname", String(255), nullable=True, comment="host the node runs on"),
    Column("version", String(64), nullable=True, comment="Chronos version of the node"),
    Column(
        "fired_per_second",
        Double,
        nullable=True,
        comment="messages the node fired per second over its last heartbeat interval",
    ),
    Column(
        "fired_at",
        DateTime(timezone=True),
        nullable=True,
        comment="when the node last had a fired record delivered (DB clock; null: not yet)",
    ),
)

# One row per ended message (fired, cancelled, expired, dead-lettered, replaced; a series: per
# recorded occurrence), written by the statement that ends it, kept for CHRONOS_HISTORY_TTL.
# Partitioned by day of ended_at (chronos_history_pYYYYMMDD, UTC days): the leader creates the
# next days' partitions ahead and drops whole partitions past their TTL (never a DELETE of
# rows: no vacuum churn). No primary key: a message fired twice (at-least-once) has two rows.
history = Table(
    "chronos_history",
    metadata,
    Column("id", String(128), nullable=False, comment="chronosMessageId of the ended message"),
    Column("tenant", String(128), nullable=True, comment="its tenant ('': the default tenant)"),
    Column(
        "outcome",
        String(16),
        nullable=False,
        comment="fired, cancelled, expired, dead-lettered or replaced",
    ),
    Column("deadline", DateTime(timezone=True), nullable=False, comment="the (occurrence's) due"),
    Column(
        "ended_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now()"),
        comment="when it ended (DB clock): the partition key",
    ),
    Column("topic", String(249), nullable=True, comment="where it was published (fired, dlq)"),
    Column("kafka_partition", Integer, nullable=True, comment="the record's partition"),
    Column("kafka_offset", BigInteger, nullable=True, comment="the record's offset"),
    Column("lateness_ms", Integer, nullable=True, comment="produced this late after its due"),
    Column("node", UUID(as_uuid=False), nullable=True, comment="the node that ended it"),
    Column("attempt", SmallInteger, nullable=True, comment="publish attempt that delivered it"),
    Column("reason", String(500), nullable=True, comment="why (a reason code, a cancel's source)"),
    Column("ended_by", String(255), nullable=True, comment="who ended it (admin token, kafka)"),
    Column(
        "next_deadline",
        DateTime(timezone=True),
        nullable=True,
        comment="a series' next occurrence after this one (NULL: none, or not a series)",
    ),
    Column(
        "recurring",
        Boolean,
        nullable=False,
        server_default=text("false"),
        comment="an occurrence of a series",
    ),
    Column(
        "message_key",
        LargeBinary,
        nullable=True,
        comment="the message's key, byte-exact (NULL: none, or recorded before 0014)",
    ),
    postgresql_partition_by="RANGE (ended_at)",
)
# Admin get by id, and the id-prefix filter (text_pattern_ops: a prefix is a range).
Index(
    "chronos_history_id_idx",
    history.c.id,
    history.c.ended_at,
    postgresql_ops={"id": "text_pattern_ops"},
)
# Admin list by outcome (and all outcomes), in the list's (deadline, id) order, the default
# tenant's records ('') grouped apart within an outcome (0017): a list of the default tenant
# walks its group alone, whatever share of the records it has; a list of every tenant merges the
# two groups' walks.
Index(
    "chronos_history_outcome_default_idx",
    history.c.outcome,
    func.coalesce(history.c.tenant, literal_column("''")) == literal_column("''"),
    history.c.deadline,
    history.c.id,
)
# Admin list of one named tenant, and a tenant's deletion (0015): the default tenant's records
# ('', most of them where there are no tenants) are left out, and listed through the outcome
# index; a statement that names a tenant proves the predicate.
Index(
    "chronos_history_tenanted_idx",
    history.c.tenant,
    history.c.outcome,
    history.c.deadline,
    history.c.id,
    postgresql_where=text("tenant <> ''"),
)
# Admin list by key, exact or by prefix: a range of the key's first KEY_INDEXED_BYTES = 64 bytes
# (0016: those bytes alone; a key's few records are checked and sorted on the heap). Not partial
# (message_key IS NOT NULL): the planner keeps statistics of its expression only then, and needs
# them to walk the outcome index instead for a key or prefix most records share.
Index("chronos_history_keyhead_idx", func.substring(history.c.message_key, 1, 64))
# Summaries over a time window: rows arrive in ended_at order, so a BRIN index (a few pages per
# partition) narrows a window to its block ranges at next to no cost per row.
Index("chronos_history_ended_idx", history.c.ended_at, postgresql_using="brin")

# The leader's maintenance of the history's partitions, as functions of the schema's owner
# (SECURITY DEFINER): the nodes' role creates and drops the history's days without owning any
# table (and no other table: a name is only ever chronos_history_pYYYYMMDD). A day is created as a
# table of its own with its bounds as a CHECK constraint, then attached (the check spares the
# attach a scan; ATTACH takes a lock of the parent that inserts never wait for); a drop takes the
# parent's exclusive lock for a moment, so it waits at most 100 ms for it and is tried again at
# the next round rather than hold the firing statements up.
HISTORY_FUNCTIONS = (
    """
CREATE OR REPLACE FUNCTION chronos_history_create_partition(day date, ttl_ms bigint)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    name text := 'chronos_history_p' || to_char(day, 'YYYYMMDD');
    low timestamptz := day::timestamp AT TIME ZONE 'UTC';
    high timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE chronos_history INCLUDING DEFAULTS, '
                   'CONSTRAINT %I CHECK (ended_at >= %L AND ended_at < %L))',
                   name, name || '_bounds', low, high);
    EXECUTE format('COMMENT ON TABLE %I IS %L', name, 'chronos history ttl_ms=' || ttl_ms);
    EXECUTE format('ALTER TABLE chronos_history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   name, low, high);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', name, name || '_bounds');
    RETURN true;
END
$$
""",
    """
CREATE OR REPLACE FUNCTION chronos_history_drop_partition(name text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp SET lock_timeout = '100ms' AS $$
BEGIN
    IF name !~ '^chronos_history_p[0-9]{8}$' OR to_regclass(name) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', name);
    RETURN true;
END
$$
""",
)
DROP_HISTORY_FUNCTIONS = (
    "DROP FUNCTION IF EXISTS chronos_history_create_partition(date, bigint)",
    "DROP FUNCTION IF EXISTS chronos_history_drop_partition(text)",
)
for _function in HISTORY_FUNCTIONS:  # DDL formats its text with %: the format's % doubled
    event.listen(history, "after_create", DDL(_function.replace("%", "%%")))  # type: ignore[no-untyped-call]
