-- The admin API's one-message actions, listings by state and backlog statistics.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: backlog
-- Backlog statistics from indexes and the planner's row estimate, never a table scan: overdue
-- rows through the ready index (parked rows excluded), parked rows through the failed index.
WITH est AS (
    SELECT greatest(coalesce(s.n_live_tup::float8, c.reltuples::float8), 0)::bigint AS n
    FROM pg_class c
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = 'chronos_messages'::regclass
), claimed AS (
    SELECT count(*) AS n, min(deadline) AS oldest, max(deadline) AS newest
    FROM chronos_messages
    WHERE readied_at IS NOT NULL
)
SELECT now() AS now,
       (SELECT n FROM est) AS estimated_rows,
       CASE WHEN coalesce((SELECT n FROM est), 0) < %(exact_below)s THEN (
           SELECT count(*) FROM (
               SELECT 1 FROM chronos_messages WHERE readied_at IS NULL
               ORDER BY deadline LIMIT %(exact_below)s
           ) u
       ) END AS unclaimed_bounded,
       (SELECT n FROM claimed) AS claimed,
       (SELECT count(*) FROM (
           SELECT 1 FROM chronos_messages
           WHERE attempts > 0 AND readied_at IS NULL
             AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
           LIMIT %(count_limit)s
       ) p) AS parked_bounded,
       (SELECT count(*) FROM (
           SELECT 1 FROM chronos_messages
           WHERE readied_at IS NULL AND parked_at IS NULL AND deadline < now()
             AND attempts < %(park_attempts)s
           ORDER BY deadline LIMIT %(count_limit)s
       ) o) AS overdue_bounded,
       (SELECT deadline FROM chronos_messages
        WHERE readied_at IS NULL AND parked_at IS NULL AND deadline < now()
          AND attempts < %(park_attempts)s
        ORDER BY deadline LIMIT 1) AS oldest_overdue,
       least(
           (SELECT deadline FROM chronos_messages WHERE readied_at IS NULL
            ORDER BY deadline LIMIT 1),
           (SELECT oldest FROM claimed)
       ) AS oldest_deadline,
       greatest(
           (SELECT deadline FROM chronos_messages WHERE readied_at IS NULL
            ORDER BY deadline DESC LIMIT 1),
           (SELECT newest FROM claimed)
       ) AS newest_deadline;

-- name: tenant_backlog
-- The busiest tenants (most overdue rows first) without a table scan: the tenants with waiting
-- rows found by a walk of the (tenant, deadline) ready index, one descent each, at most
-- max_tenants of them in name order; each tenant's waiting and overdue rows counted through the
-- same index up to count_limit; claimed rows (few: in-flight limits) through the claimed_by index,
-- parked rows (rare) through the failed index. NULL (rows of a release before tenants) is ''.
WITH RECURSIVE walk(tenant) AS (
    (SELECT m.tenant FROM chronos_messages m
     WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant IS NOT NULL
     ORDER BY m.tenant LIMIT 1)
    UNION ALL
    SELECT n.tenant
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT m.tenant FROM chronos_messages m
        WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant > w.tenant
        ORDER BY m.tenant LIMIT 1
    ) n
), walked AS MATERIALIZED (
    SELECT tenant FROM walk LIMIT %(max_tenants)s
), waiting AS (
    SELECT t.tenant, w.n AS waiting, o.n AS overdue, o.oldest AS oldest_overdue
    FROM walked t
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM chronos_messages m
            WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant = t.tenant
              AND m.attempts < %(park_attempts)s
            ORDER BY m.deadline LIMIT %(count_limit)s
        ) x
    ) w
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(x.deadline) AS oldest FROM (
            SELECT m.deadline FROM chronos_messages m
            WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant = t.tenant
              AND m.deadline < now() AND m.attempts < %(park_attempts)s
            ORDER BY m.deadline LIMIT %(count_limit)s
        ) x
    ) o
    UNION ALL
    SELECT '', w.n, o.n, o.oldest
    FROM (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM chronos_messages m
            WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant IS NULL
              AND m.attempts < %(park_attempts)s
            ORDER BY m.deadline LIMIT %(count_limit)s
        ) x
    ) w
    CROSS JOIN (
        SELECT count(*) AS n, min(x.deadline) AS oldest FROM (
            SELECT m.deadline FROM chronos_messages m
            WHERE coalesce(m.readied_at, m.parked_at) IS NULL AND m.tenant IS NULL
              AND m.deadline < now() AND m.attempts < %(park_attempts)s
            ORDER BY m.deadline LIMIT %(count_limit)s
        ) x
    ) o
), claimed AS (
    SELECT coalesce(m.tenant, '') AS tenant, count(*) AS n
    FROM chronos_messages m
    WHERE m.readied_at IS NOT NULL
    GROUP BY 1
), parked AS (
    SELECT coalesce(p.tenant, '') AS tenant, count(*) AS n
    FROM (
        SELECT m.tenant FROM chronos_messages m
        WHERE m.attempts > 0 AND m.readied_at IS NULL
          AND (m.attempts >= %(park_attempts)s OR m.parked_at IS NOT NULL)
        LIMIT %(count_limit)s
    ) p
    GROUP BY 1
), everything AS (
    SELECT tenant, waiting, overdue, oldest_overdue, 0::bigint AS claimed, 0::bigint AS parked
    FROM waiting
    UNION ALL
    SELECT tenant, 0, 0, NULL, n, 0 FROM claimed
    UNION ALL
    SELECT tenant, 0, 0, NULL, 0, n FROM parked
)
SELECT now() AS now, tenant,
       least(sum(waiting), %(count_limit)s) AS waiting,
       least(sum(overdue), %(count_limit)s) AS overdue,
       min(oldest_overdue) AS oldest_overdue,
       sum(claimed) AS claimed, sum(parked) AS parked,
       (SELECT count(*) FROM walked) AS tenants_walked
FROM everything
GROUP BY tenant
HAVING sum(waiting) + sum(claimed) + sum(parked) > 0
ORDER BY overdue DESC, waiting DESC, tenant
LIMIT %(limit)s;

-- name: get_message
-- One scheduled message by id, with the size of its value (the value itself only if asked).
SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
       target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
       tenant, expires_ms, octet_length(message_value) AS value_size,
       CASE WHEN %(include_value)s THEN message_value END AS message_value
FROM chronos_messages
WHERE id = %(id)s;

-- name: list_waiting
-- Admin list of waiting rows (unclaimed, not parked) after a (deadline, id) cursor; ready index.
-- Bounded by bytes too: rows are taken while the running sum of their keys and headers (as text)
-- stays under `max_bytes` (the row that crosses it is returned as well, so the caller knows
-- there is more; `page_bytes` is the running sum).
SELECT * FROM (
    SELECT sized.*, sum(sized.row_bytes) OVER (ORDER BY deadline, id) AS page_bytes
    FROM (
        SELECT listed.*,
               coalesce(octet_length(listed.message_key), 0)
               + coalesce(octet_length(listed.message_headers::text), 0) AS row_bytes
        FROM (
        SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
               target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
               octet_length(message_value) AS value_size, NULL::bytea AS message_value
        FROM chronos_messages
        WHERE readied_at IS NULL
          AND parked_at IS NULL
          AND attempts < %(park_attempts)s
          AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
          AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL OR deadline > %(after_deadline)s::timestamptz
               OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(limit)s
        ) listed
    ) sized
) paged
WHERE page_bytes - row_bytes < %(max_bytes)s::bigint
ORDER BY deadline, id;

-- name: list_parked
-- Admin list of parked rows (parked_at set, or attempts at the park threshold) after a cursor;
-- failed index (a parked row has failed at least once).
-- Bounded by bytes too: rows are taken while the running sum of their keys and headers (as text)
-- stays under `max_bytes` (the row that crosses it is returned as well, so the caller knows
-- there is more; `page_bytes` is the running sum).
SELECT * FROM (
    SELECT sized.*, sum(sized.row_bytes) OVER (ORDER BY deadline, id) AS page_bytes
    FROM (
        SELECT listed.*,
               coalesce(octet_length(listed.message_key), 0)
               + coalesce(octet_length(listed.message_headers::text), 0) AS row_bytes
        FROM (
        SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
               target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
               octet_length(message_value) AS value_size, NULL::bytea AS message_value
        FROM chronos_messages
        WHERE attempts > 0
          AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
          AND readied_at IS NULL
          AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
          AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL OR deadline > %(after_deadline)s::timestamptz
               OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(limit)s
        ) listed
    ) sized
) paged
WHERE page_bytes - row_bytes < %(max_bytes)s::bigint
ORDER BY deadline, id;

-- name: list_claimed
-- Admin list of claimed rows (few: bounded by in-flight limits) after a cursor; claimed_by index.
-- Bounded by bytes too: rows are taken while the running sum of their keys and headers (as text)
-- stays under `max_bytes` (the row that crosses it is returned as well, so the caller knows
-- there is more; `page_bytes` is the running sum).
SELECT * FROM (
    SELECT sized.*, sum(sized.row_bytes) OVER (ORDER BY deadline, id) AS page_bytes
    FROM (
        SELECT listed.*,
               coalesce(octet_length(listed.message_key), 0)
               + coalesce(octet_length(listed.message_headers::text), 0) AS row_bytes
        FROM (
        SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
               target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
               octet_length(message_value) AS value_size, NULL::bytea AS message_value
        FROM chronos_messages
        WHERE readied_at IS NOT NULL
          AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
          AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
          AND (%(after_deadline)s::timestamptz IS NULL OR deadline > %(after_deadline)s::timestamptz
               OR (deadline = %(after_deadline)s::timestamptz AND id > %(after_id)s::text))
        ORDER BY deadline, id
        LIMIT %(limit)s
        ) listed
    ) sized
) paged
WHERE page_bytes - row_bytes < %(max_bytes)s::bigint
ORDER BY deadline, id;

-- name: list_all
-- Admin list of every row after a cursor: unclaimed (due index) merged with claimed rows.
-- Bounded by bytes too: rows are taken while the running sum of their keys and headers (as text)
-- stays under `max_bytes` (the row that crosses it is returned as well, so the caller knows
-- there is more; `page_bytes` is the running sum).
SELECT * FROM (
    SELECT sized.*, sum(sized.row_bytes) OVER (ORDER BY deadline, id) AS page_bytes
    FROM (
        SELECT listed.*,
               coalesce(octet_length(listed.message_key), 0)
               + coalesce(octet_length(listed.message_headers::text), 0) AS row_bytes
        FROM (
        SELECT * FROM (
            (SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
                    target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
                    octet_length(message_value) AS value_size, NULL::bytea AS message_value
             FROM chronos_messages
             WHERE readied_at IS NULL
               AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
               AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
               AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
               AND (%(after_deadline)s::timestamptz IS NULL OR deadline > %(after_deadline)s::timestamptz
                    OR id > %(after_id)s::text)
             ORDER BY deadline, id
             LIMIT %(limit)s)
            UNION ALL
            (SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
                    target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
                    octet_length(message_value) AS value_size, NULL::bytea AS message_value
             FROM chronos_messages
             WHERE readied_at IS NOT NULL
               AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
               AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
               AND (%(after_deadline)s::timestamptz IS NULL OR deadline > %(after_deadline)s::timestamptz
                    OR (deadline = %(after_deadline)s::timestamptz AND id > %(after_id)s::text))
             ORDER BY deadline, id
             LIMIT %(limit)s)
        ) merged
        ORDER BY deadline, id
        LIMIT %(limit)s
        ) listed
    ) sized
) paged
WHERE page_bytes - row_bytes < %(max_bytes)s::bigint
ORDER BY deadline, id;

-- name: cancel_message
-- Delete a message unless claimed (it may be firing); no row returned = not scheduled. Leaves
-- the same cancel marker a Kafka cancel does (for `cancel_ttl_ms`): a schedule of the id arriving
-- meanwhile is dropped, and a claimed message is deleted, not given back, when its claim ends (a
-- claimed series fires that occurrence and ends: its rule is cleared, and a replacement of it
-- since the claim is void, as enqueue_batch's cancel does). With `history`, a deleted message's
-- history record says who cancelled it (`by`).
WITH target AS (
    SELECT id, readied_at FROM chronos_messages WHERE id = %(id)s FOR UPDATE
), deleted AS (
    DELETE FROM chronos_messages m
    USING target t
    WHERE m.id = t.id AND t.readied_at IS NULL
    RETURNING m.id, m.tenant, m.deadline, m.recurrence, m.message_key
), recorded AS (
    INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, ended_by, recurring,
                                 message_key)
    SELECT id, coalesce(tenant, ''), 'cancelled', deadline, 'admin', left(%(by)s::text, 255),
           recurrence IS NOT NULL, message_key
    FROM deleted
    WHERE %(history)s::boolean
), ended AS (
    UPDATE chronos_messages m
    SET recurrence = NULL, enqueued_at = least(m.enqueued_at, m.readied_at)
    FROM target t
    WHERE m.id = t.id AND t.readied_at IS NOT NULL
      AND (m.recurrence IS NOT NULL OR m.enqueued_at > m.readied_at)
    RETURNING m.id
), marked AS (
    INSERT INTO chronos_cancels (id, expires_at)
    VALUES (%(id)s, now() + make_interval(secs => %(cancel_ttl_ms)s / 1000.0))
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING id
)
SELECT t.readied_at IS NOT NULL AS claimed, EXISTS (SELECT 1 FROM deleted) AS deleted
FROM target t;

-- name: requeue_message
-- Give a parked message a fresh start: attempts, parked_at and last_error reset, so the claim
-- takes it (at once if due). Returns no row for an unknown id, requeued = false if not parked.
WITH target AS (
    SELECT id, readied_at, attempts, parked_at
    FROM chronos_messages
    WHERE id = %(id)s
    FOR UPDATE
), requeued AS (
    UPDATE chronos_messages m
    SET attempts = 0, parked_at = NULL, last_error = NULL
    FROM target t
    WHERE m.id = t.id
      AND t.readied_at IS NULL
      AND (t.parked_at IS NOT NULL OR (t.attempts > 0 AND t.attempts >= %(park_attempts)s))
    RETURNING m.id
)
SELECT EXISTS (SELECT 1 FROM requeued) AS requeued
FROM target t;

-- name: reschedule_message
-- Move a waiting message to a new deadline (given, or now() + delay_ms); a claimed or parked one
-- is left alone. No row for an unknown id; id is NULL unless rescheduled (claimed says why).
WITH target AS (
    SELECT id, readied_at, attempts, parked_at
    FROM chronos_messages
    WHERE id = %(id)s
    FOR UPDATE
), moved AS (
    UPDATE chronos_messages m
    SET deadline = coalesce(%(deadline)s::timestamptz,
                            now() + make_interval(secs => %(delay_ms)s::bigint / 1000.0))
    FROM target t
    WHERE m.id = t.id
      AND t.readied_at IS NULL
      AND t.parked_at IS NULL
      AND NOT (t.attempts > 0 AND t.attempts >= %(park_attempts)s)
    RETURNING m.id, m.deadline, m.readied_at, m.readied_by::text AS readied_by, m.attempts,
              m.last_error, m.target_topic, m.enqueued_at, m.parked_at, m.recurrence, m.message_key,
              m.message_headers, octet_length(m.message_value) AS value_size,
              NULL::bytea AS message_value
)
SELECT t.readied_at IS NOT NULL AS claimed, x.*
FROM target t
LEFT JOIN moved x ON true;
