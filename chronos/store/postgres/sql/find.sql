-- The admin API by filter: find, count, estimate, and bulk cancel and reschedule in batches.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: find_messages
-- Admin list by filter (tenant, target topic, id prefix, key exact or by prefix, state, deadline
-- range, recurring or not) after a (deadline, id) cursor: one branch per state, each walking
-- its own index (waiting: the ready, tenant, topic, id, key or recurring index the filter
-- picks; parked: the failed index; claimed: the claimed index), merged by (deadline, id). A
-- filter not given (NULL) folds away when the statement is planned with its parameters; the
-- tenant index's predicate (coalesce(readied_at, parked_at) IS NULL, which the planner
-- estimates far too selective) is written only with a tenant, so that only the tenant filter
-- walks that index.
-- Bounded by bytes like list_waiting (`page_bytes`: the running sum of keys and headers).
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
               tenant, expires_ms, octet_length(message_value) AS value_size,
               NULL::bytea AS message_value
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'waiting')
          AND readied_at IS NULL AND parked_at IS NULL
          AND attempts < %(park_attempts)s
          AND (%(tenant)s::text IS NULL OR coalesce(readied_at, parked_at) IS NULL)
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(limit)s)
        UNION ALL
        (SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
               target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
               tenant, expires_ms, octet_length(message_value) AS value_size,
               NULL::bytea AS message_value
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'parked')
          AND attempts > 0
          AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
          AND readied_at IS NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(limit)s)
        UNION ALL
        (SELECT id, deadline, readied_at, readied_by::text AS readied_by, attempts, last_error,
               target_topic, enqueued_at, parked_at, recurrence, message_key, message_headers,
               tenant, expires_ms, octet_length(message_value) AS value_size,
               NULL::bytea AS message_value
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'claimed')
          AND readied_at IS NOT NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
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

-- name: count_messages
-- How many rows match an admin filter (as find_messages, the cursor unused: NULL), each state's
-- branch stopping at `count_limit` rows in no order (so it never sorts): exact below it, "at
-- least" at it.
SELECT count(*) AS matched FROM (
        (SELECT 1 AS one
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'waiting')
          AND readied_at IS NULL AND parked_at IS NULL
          AND attempts < %(park_attempts)s
          AND (%(tenant)s::text IS NULL OR coalesce(readied_at, parked_at) IS NULL)
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        LIMIT %(count_limit)s)
        UNION ALL
        (SELECT 1 AS one
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'parked')
          AND attempts > 0
          AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
          AND readied_at IS NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        LIMIT %(count_limit)s)
        UNION ALL
        (SELECT 1 AS one
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'claimed')
          AND readied_at IS NOT NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        LIMIT %(count_limit)s)
) counted;

-- name: estimate_messages
-- An estimate of how many rows match an admin filter, for when count_messages stopped at its
-- limit: of the rows in a block sample of `sample_percent` percent of the table (SYSTEM: whole
-- pages, a fixed seed), how many there are and how many match; the caller scales the share
-- matching to the table's rows. Reads about that share of the pages, never the whole table;
-- every state's test is the one of its find_messages branch.
SELECT count(*) AS sampled, count(*) FILTER (WHERE
      ((readied_at IS NULL AND parked_at IS NULL AND attempts < %(park_attempts)s
        AND (%(state)s::text IS NULL OR %(state)s::text = 'waiting'))
       OR (readied_at IS NULL AND attempts > 0
           AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
           AND (%(state)s::text IS NULL OR %(state)s::text = 'parked'))
       OR (readied_at IS NOT NULL
           AND (%(state)s::text IS NULL OR %(state)s::text = 'claimed')))
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
       OR (%(tenant)s::text = '' AND tenant IS NULL))
  AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
       OR (%(topic_unset)s AND target_topic IS NULL))
  AND (%(id_like)s::text IS NULL OR id LIKE %(id_like)s::text)
  AND (%(key_low)s::bytea IS NULL
       OR (%(key_exact)s AND message_key = %(key)s::bytea)
       OR (NOT %(key_exact)s
           AND substring(message_key from 1 for octet_length(%(key)s::bytea)) = %(key)s::bytea))
  AND deadline >= coalesce(%(deadline_from)s::timestamptz, '-infinity')
  AND deadline < coalesce(%(deadline_to)s::timestamptz, 'infinity')
  AND (%(recurring)s::boolean IS NULL
       OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
       OR (NOT %(recurring)s::boolean AND recurrence IS NULL))) AS matched
FROM chronos_messages TABLESAMPLE SYSTEM (%(sample_percent)s::float8) REPEATABLE (42);

-- name: table_rows
-- How many rows the table holds, as the planner reckons it (never a scan): the last ANALYZE's
-- rows per page times the pages the table has now, so growth since then counts; before any
-- ANALYZE, the live rows the statistics count. (Not the greater of the two: a backend flushes
-- its insert counts up to a second late, after an ANALYZE that already counted them, so the
-- live count can read double.) What sizes estimate_messages' sample and scales its share.
SELECT greatest(CASE
           WHEN c.reltuples >= 0 AND c.relpages > 0 THEN c.reltuples::float8 / c.relpages
               * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
           ELSE coalesce(s.n_live_tup::float8, 0)
       END, 0)::bigint AS n
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = 'chronos_messages'::regclass;

-- name: bulk_cancel
-- One batch of a cancel by filter: up to `batch` matching rows after the cursor (as
-- find_messages, by (deadline, id)), locked in id order; the unclaimed ones are deleted, a
-- claimed one ends as enqueue_batch's cancel ends it (a series loses its rule: the occurrence
-- in flight fires, none follows; a replacement since the claim is void; a write on the row, so
-- an advance waiting on its lock sees it) and every one gets a cancel marker, as a Kafka cancel
-- leaves. Returns the counts, the last (deadline, id) taken (the next batch's cursor) and the
-- database clock.
WITH picked AS (
    SELECT id, deadline FROM (
        (SELECT id, deadline
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'waiting')
          AND readied_at IS NULL AND parked_at IS NULL
          AND attempts < %(park_attempts)s
          AND (%(tenant)s::text IS NULL OR coalesce(readied_at, parked_at) IS NULL)
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(batch)s)
        UNION ALL
        (SELECT id, deadline
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'parked')
          AND attempts > 0
          AND (attempts >= %(park_attempts)s OR parked_at IS NOT NULL)
          AND readied_at IS NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(batch)s)
        UNION ALL
        (SELECT id, deadline
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'claimed')
          AND readied_at IS NOT NULL
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
        ORDER BY deadline, id
        LIMIT %(batch)s)
    ) merged
    ORDER BY deadline, id
    LIMIT %(batch)s
), target AS (
    SELECT m.id, m.readied_at
    FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM picked))
    ORDER BY m.id
    FOR UPDATE
), deleted AS (
    DELETE FROM chronos_messages m
    USING target t
    WHERE m.id = t.id AND t.readied_at IS NULL
    RETURNING m.id, m.tenant, m.deadline, m.recurrence, m.message_key
), recorded AS (  -- with `history`: each deleted message's record, with who cancelled it (`by`)
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
    SELECT id, now() + make_interval(secs => %(cancel_ttl_ms)s / 1000.0)
    FROM target
    ORDER BY id
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING id
)
SELECT (SELECT count(*) FROM deleted) AS done,
       (SELECT count(*) FROM target WHERE readied_at IS NOT NULL) AS claimed,
       (SELECT count(*) FROM picked) AS picked,
       last.deadline AS last_deadline, last.id AS last_id, now() AS now
FROM (SELECT 1) one
LEFT JOIN LATERAL (SELECT deadline, id FROM picked ORDER BY deadline DESC, id DESC LIMIT 1) last
    ON true;

-- name: bulk_reschedule
-- One batch of a reschedule by filter (waiting rows only; parked and claimed rows are left
-- alone, as the single reschedule does): up to `batch` matching rows after the cursor, inserted
-- before `since` (the first batch's clock: a moved row is never met again), locked in id order,
-- moved to `deadline`, by `shift_ms`, or to now() (`fire_now`: rows not yet due); a moved row's
-- enqueued_at is the move, as a Kafka reschedule's. Returns as bulk_cancel does.
WITH picked AS (
    (SELECT id, deadline
        FROM chronos_messages
        WHERE (%(state)s::text IS NULL OR %(state)s::text = 'waiting')
          AND readied_at IS NULL AND parked_at IS NULL
          AND attempts < %(park_attempts)s
          AND (%(tenant)s::text IS NULL OR coalesce(readied_at, parked_at) IS NULL)
          AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text
               OR (%(tenant)s::text = '' AND tenant IS NULL))
          AND (%(topic)s::text IS NULL OR target_topic = %(topic)s::text
               OR (%(topic_unset)s AND target_topic IS NULL))
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
          AND (%(recurring)s::boolean IS NULL
               OR (%(recurring)s::boolean AND recurrence IS NOT NULL)
               OR (NOT %(recurring)s::boolean AND recurrence IS NULL))
          AND deadline >= coalesce(%(after_deadline)s::timestamptz, '-infinity')
          AND (%(after_deadline)s::timestamptz IS NULL
               OR deadline > %(after_deadline)s::timestamptz OR id > %(after_id)s::text)
          AND enqueued_at <= coalesce(%(since)s::timestamptz, 'infinity')
          AND (NOT %(fire_now)s OR deadline > now())
        ORDER BY deadline, id
        LIMIT %(batch)s)
), target AS (
    SELECT m.id, m.readied_at, m.parked_at, m.attempts
    FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM picked))
    ORDER BY m.id
    FOR UPDATE
), moved AS (
    UPDATE chronos_messages m
    SET deadline = CASE
            WHEN %(fire_now)s THEN now()
            WHEN %(deadline)s::timestamptz IS NOT NULL THEN %(deadline)s::timestamptz
            ELSE m.deadline + make_interval(secs => %(shift_ms)s::bigint / 1000.0)
        END,
        enqueued_at = clock_timestamp()
    FROM target t
    WHERE m.id = t.id
      AND t.readied_at IS NULL
      AND t.parked_at IS NULL
      AND t.attempts < %(park_attempts)s
    RETURNING m.id
)
SELECT (SELECT count(*) FROM moved) AS done,
       (SELECT count(*) FROM target WHERE readied_at IS NOT NULL) AS claimed,
       (SELECT count(*) FROM picked) AS picked,
       last.deadline AS last_deadline, last.id AS last_id, now() AS now
FROM (SELECT 1) one
LEFT JOIN LATERAL (SELECT deadline, id FROM picked ORDER BY deadline DESC, id DESC LIMIT 1) last
    ON true;
