-- The history of ended messages: its partitions, a message's records, a filtered page, a summary.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. The records themselves are written by the statements that end the
-- messages (delete_fired, advance_fired, enqueue_batch, cancel_message, bulk_cancel), except
-- those of messages that end without a row (record_ended).

-- name: history_partitions
-- The history's partitions (the leader's maintenance): each one's name and comment (the time to
-- live it was created with), with the database clock.
SELECT c.relname AS name, obj_description(c.oid, 'pg_class') AS comment, now() AS now
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('chronos_history')
ORDER BY c.relname;

-- name: record_ended
-- The records of messages that ended without a row (intake published them as they arrived
-- already due, or set them aside: expired, refused by the database), a settled pass's in one
-- statement: binary arrays, record by record (ids, tenants, outcomes, deadlines, topics,
-- partitions, offsets, lateness in ms, attempts, reasons, recurring, keys), ended now by
-- `node_id`.
-- A day without a partition fails it whole (check_violation): the caller counts them lost.
WITH recorded AS (
    INSERT INTO chronos_history (id, tenant, outcome, deadline, topic, kafka_partition,
                                 kafka_offset, lateness_ms, node, attempt, reason, recurring,
                                 message_key)
    SELECT e.id, coalesce(e.tenant, ''), e.outcome, e.deadline, e.topic, e.kafka_partition,
           e.kafka_offset, e.lateness_ms, %(node_id)s::uuid, e.attempt, e.reason, e.recurring,
           e.message_key
    FROM unnest(%(ids)b::text[], %(tenants)b::text[], %(outcomes)b::text[],
                %(deadlines)b::timestamptz[], %(topics)b::text[], %(partitions)b::int4[],
                %(offsets)b::int8[], %(lateness)b::int4[], %(attempts)b::int4[],
                %(reasons)b::text[], %(recurring)b::bool[], %(keys)b::bytea[])
         AS e(id, tenant, outcome, deadline, topic, kafka_partition, kafka_offset, lateness_ms,
              attempt, reason, recurring, message_key)
    RETURNING 1
)
SELECT count(*) AS n FROM recorded;

-- name: ended_message
-- A message's history records, newest first (admin get of an ended message): the id index of
-- each partition.
SELECT id, tenant, outcome, deadline, ended_at, topic, kafka_partition, kafka_offset,
       lateness_ms, node::text AS node, attempt, reason, ended_by, next_deadline, recurring,
       message_key
FROM chronos_history
WHERE id = %(id)s::text
ORDER BY ended_at DESC
LIMIT %(limit)s;

-- name: find_ended
-- Admin list of ended messages by filter (outcome, tenant, topic, id prefix, key exact or by
-- prefix, deadline range, recurring or not) after a (deadline, id) cursor, in (deadline, id,
-- ended_at) order: one LIMIT-ed walk per outcome asked for and group of tenants (the outcome
-- index, (outcome, the default tenant's or not, deadline, id): the default tenant's group alone
-- for `tenant` '', both groups for every tenant; the tenant index with a named tenant:
-- (tenant, outcome, deadline, id) WHERE tenant <> '', which the session's custom plans prove
-- from the tenant given), each a merge of the partitions' index scans, then merged: a page of
-- `limit` rows reads about `limit` index entries per walk, whatever the number of records and
-- the default tenant's share of them. With a key, the key index instead (the key's first 64
-- bytes: an exact key or a prefix is a range of it), its records checked for the outcome and the
-- whole key and sorted (a key's few records; a key most records share is read through the
-- outcome index, filtered). A record without a key (NULL: written before 0014, or by the release
-- before it) never matches a key.
-- Bounded by bytes like find_messages: records are taken while the keys before theirs stay
-- under `max_bytes` (the crossing message is returned as well: the caller's sign that there is
-- more), a message's records (fired twice) all or none, as the (deadline, id) cursor resumes
-- after the whole message.
SELECT * FROM (
    SELECT found.*,
           sum(coalesce(octet_length(found.message_key), 0)) OVER (ORDER BY deadline, id)
           - sum(coalesce(octet_length(found.message_key), 0)) OVER (PARTITION BY deadline, id)
           AS bytes_before
    FROM (
        SELECT h.*
        FROM unnest(%(outcomes)s::text[]) AS o(outcome)
        CROSS JOIN unnest(CASE WHEN %(tenant)s::text IS NULL THEN ARRAY[true, false]
                               ELSE ARRAY[%(tenant)s::text = ''] END) AS g(default_tenant)
        CROSS JOIN LATERAL (
            SELECT id, tenant, outcome, deadline, ended_at, topic, kafka_partition, kafka_offset,
                   lateness_ms, node::text AS node, attempt, reason, ended_by, next_deadline, recurring,
                   message_key
            FROM chronos_history
            WHERE outcome = o.outcome
              AND (coalesce(tenant, '') = '') = g.default_tenant
              AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
              AND (%(topic)s::text IS NULL OR topic = %(topic)s::text)
              AND (%(id_like)s::text IS NULL OR id LIKE %(id_like)s::text)
              AND (%(key_low)s::bytea IS NULL
                   OR (%(key_exact)s
                       AND substring(message_key from 1 for 64) = %(key_low)s::bytea
                       AND message_key = %(key)s::bytea)
                   OR (NOT %(key_exact)s
                       AND substring(message_key from 1 for 64) >= %(key_low)s::bytea
                       AND (%(key_high)s::bytea IS NULL
                            OR substring(message_key from 1 for 64) < %(key_high)s::bytea)
                       AND substring(message_key from 1 for octet_length(%(key)s::bytea))
                           = %(key)s::bytea))
              AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
              AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
              AND (%(recurring)s::boolean IS NULL OR recurring = %(recurring)s::boolean)
              AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
              AND (%(after_deadline)s::timestamptz IS NULL
                   OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
            ORDER BY deadline, id
            LIMIT %(limit)s
        ) h
        ORDER BY h.deadline, h.id, h.ended_at
        LIMIT %(limit)s
    ) found
) sized
WHERE %(max_bytes)s::bigint IS NULL OR bytes_before < %(max_bytes)s::bigint
ORDER BY deadline, id, ended_at;

-- name: summarize_history
-- Counts by tenant and outcome of the records that ended within [since, until), with the fired
-- ones' lateness at the median and the 99th percentile (ms): the partitions of the window only,
-- narrowed to its block ranges by the BRIN index on ended_at.
SELECT coalesce(tenant, '') AS tenant, outcome, count(*) AS count,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness_ms)
           FILTER (WHERE outcome = 'fired') AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness_ms)
           FILTER (WHERE outcome = 'fired') AS p99
FROM chronos_history
WHERE ended_at >= %(since)s::timestamptz
  AND ended_at < coalesce(%(until)s::timestamptz, 'infinity')
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY 1, 2
ORDER BY 1, 2
LIMIT %(limit)s;

-- name: count_tenant_history
-- How many history records a tenant has, counted up to `limit` (a deletion's dry run): a named
-- tenant's through the tenant index of each partition (the session's custom plans prove its
-- predicate, tenant <> '', from the tenant given), the default tenant's ('') by reading them.
SELECT count(*) AS n
FROM (SELECT 1 FROM chronos_history WHERE tenant = %(tenant)s::text LIMIT %(limit)s) t;

-- name: delete_tenant_history
-- One batch of a tenant's deletion: the records of up to `batch` of its messages (every record of
-- each), found as count_tenant_history finds them; returns how many records went.
WITH gone AS (
    DELETE FROM chronos_history
    WHERE tenant = %(tenant)s::text
      AND id = ANY(ARRAY(SELECT id FROM chronos_history
                         WHERE tenant = %(tenant)s::text
                         LIMIT %(batch)s))
    RETURNING 1
)
SELECT count(*) AS n FROM gone;

-- name: create_history_partition
-- The leader's maintenance: create the history's partition of `day` (UTC) with its time to live,
-- through the owner's function (false: it existed).
SELECT chronos_history_create_partition(%(day)s::date, %(ttl_ms)s::bigint) AS created;

-- name: drop_history_partition
-- The leader's maintenance: drop a day's partition of the history whole, through the owner's
-- function (false: no such partition).
SELECT chronos_history_drop_partition(%(name)s::text) AS dropped;
