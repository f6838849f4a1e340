-- Leadership and membership: heartbeats, the leader, and the leader's upkeep of nodes and tenants.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: heartbeat
-- A node announces it is alive (insert on its first beat, then move heartbeat_at to now()),
-- with its fire rate over its last heartbeat interval (null: none to report) and when it last
-- had a record delivered, `fired_ago_s` seconds before now() (null: not yet).
INSERT INTO chronos_nodes (node_id, started_at, heartbeat_at, hostname, version,
                           fired_per_second, fired_at)
VALUES (%(node_id)s::uuid, coalesce(%(started_at)s::timestamptz, now()), now(),
        %(hostname)s, %(version)s, %(fired_per_second)s::double precision,
        now() - make_interval(secs => %(fired_ago_s)s::double precision))
ON CONFLICT (node_id) DO UPDATE
SET heartbeat_at = now(), hostname = EXCLUDED.hostname, version = EXCLUDED.version,
    fired_per_second = EXCLUDED.fired_per_second, fired_at = EXCLUDED.fired_at;

-- name: register_node
-- A node process starts: take its node id unless a live node holds it (heartbeat within
-- `live_s`). Returns the process's start on the database clock (the fence of its claims), or
-- no row when the id is taken.
INSERT INTO chronos_nodes (node_id, started_at, heartbeat_at, hostname, version)
VALUES (%(node_id)s::uuid, now(), now(), %(hostname)s, %(version)s)
ON CONFLICT (node_id) DO UPDATE
SET started_at = now(), heartbeat_at = now(), hostname = EXCLUDED.hostname,
    version = EXCLUDED.version
WHERE chronos_nodes.heartbeat_at < now() - make_interval(secs => %(live_s)s)
RETURNING started_at;

-- name: remove_node
-- A node leaves at graceful shutdown: delete its heartbeat row.
DELETE FROM chronos_nodes WHERE node_id = %(node_id)s::uuid RETURNING node_id::text;

-- name: prune_tenants
-- Forget up to `limit` known tenants (never the default one, '') with no waiting row: one probe
-- of the (tenant, deadline) ready index each, so the cost is bounded by `limit` probes whatever
-- the table holds. A tenant whose rows are all claimed or parked, or whose first message is being
-- inserted as this runs, may be forgotten too: its rows are still claimed (oldest first, and by
-- the fair claim's fill), and intake records the tenant again with its next message.
DELETE FROM chronos_tenants
WHERE tenant IN (
    SELECT t.tenant
    FROM chronos_tenants t
    WHERE t.tenant <> ''
      AND NOT EXISTS (
          SELECT 1
          FROM chronos_messages m
          WHERE m.tenant = t.tenant
            AND coalesce(m.readied_at, m.parked_at) IS NULL
      )
    ORDER BY t.tenant
    LIMIT %(limit)s
)
RETURNING tenant;

-- name: expire_nodes
-- Forget nodes whose last heartbeat is older than `retain_s` seconds (killed, never shut down).
DELETE FROM chronos_nodes
WHERE heartbeat_at < now() - make_interval(secs => %(retain_s)s)
RETURNING node_id::text;

-- name: list_nodes
-- Live nodes (heartbeat within live_s), nodes holding claims and, if asked, every known node.
WITH claims AS (
    SELECT readied_by AS node_id, count(*) AS claimed, min(readied_at) AS oldest_claim_at
    FROM chronos_messages
    WHERE readied_at IS NOT NULL
    GROUP BY readied_by
), known AS (
    SELECT coalesce(n.node_id, c.node_id) AS node_id, n.started_at, n.heartbeat_at, n.hostname,
           n.version, n.fired_per_second, coalesce(c.claimed, 0) AS claimed, c.oldest_claim_at,
           coalesce(n.heartbeat_at > now() - make_interval(secs => %(live_s)s), false) AS live
    FROM chronos_nodes n
    FULL JOIN claims c ON c.node_id = n.node_id
)
SELECT node_id::text AS node_id, started_at, heartbeat_at, hostname, version, claimed,
       oldest_claim_at, live, fired_per_second,
       extract(epoch FROM now() - heartbeat_at)::double precision AS heartbeat_age_seconds,
       now() AS now
FROM known
WHERE live OR claimed > 0 OR %(include_dead)s
ORDER BY node_id;

-- name: elect_leader
-- The leader: the lowest node id whose heartbeat is younger than `window_ms` (database clock).
SELECT node_id::text AS node_id
FROM chronos_nodes
WHERE heartbeat_at > now() - make_interval(secs => %(window_ms)s / 1000.0)
ORDER BY node_id
LIMIT 1;

-- name: peers_delivering
-- How many other nodes had a record delivered within the last `within_ms` (database clock, as
-- their heartbeats said). A node whose own deliveries stall asks: its peers delivering mean it
-- alone is cut off from Kafka; none delivering, the cluster's writes stall (a broker's death).
SELECT count(*)::int AS peers
FROM chronos_nodes
WHERE node_id <> %(node_id)s::uuid
  AND fired_at > now() - make_interval(secs => %(within_ms)s / 1000.0);

-- name: shard_table
-- Whether chronos_shard exists (schema revision 0018 on).
SELECT to_regclass('chronos_shard') IS NOT NULL AS present;

-- name: shard_record
-- The shard this database is, of how many, and the map (chronos_shard, written by chronos
-- migrate): no row where it was never written.
SELECT shard, shards, map FROM chronos_shard WHERE id = 1;

-- name: messages_dead_rows
-- The messages table's dead row versions, as the statistics count them, and whether this role
-- may vacuum it (Postgres 17 and later: the MAINTAIN privilege, which its owner has; before:
-- it owns the table, or is a member of its owner): the leader's vacuum
-- (chronos.cluster.vacuum) runs when there are enough of them.
SELECT coalesce(s.n_dead_tup, 0)::bigint AS dead,
       CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN')
            ELSE pg_has_role(c.relowner, 'MEMBER') END AS may_vacuum
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = 'chronos_messages'::regclass;

-- name: vacuum_session
-- The vacuum's connection (its thread's own) runs without a statement timeout: a vacuum's time
-- follows the table's size, and SKIP_LOCKED means it never waits for a lock.
SELECT set_config('statement_timeout', '0', false);

-- name: vacuum_messages
-- The leader's vacuum of the messages table (chronos.cluster.vacuum): the dead row versions and
-- index entries that every message leaves, removed before the claims must walk a minute of
-- them. No ANALYZE (Postgres's autovacuum keeps the statistics); a table another vacuum is on
-- (an autovacuum) is skipped, not waited for.
VACUUM (SKIP_LOCKED) chronos_messages;
