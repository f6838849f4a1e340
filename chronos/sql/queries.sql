-- Runtime SQL of Chronos, as named blocks. Each block starts with `-- name: <name>` and a
-- one-line description. Parameters are psycopg placeholders (%(name)s); no SQL is ever built by
-- string formatting. All deadline and hold-time comparisons use the database clock (now()).

-- name: enqueue_batch
-- Insert a consumed batch in one statement: rows not yet due (deadline beyond now + advance) are
-- inserted (an id already waiting or ready is ignored); for every input row report whether it
-- was due, whether it was inserted, and whether its id already existed (before this statement).
WITH batch AS (
    SELECT *
    FROM unnest(
        %(ids)s::text[], %(deadlines)s::timestamptz[], %(keys)s::bytea[],
        %(vals)s::bytea[], %(headers)s::jsonb[]
    ) WITH ORDINALITY AS b(id, deadline, message_key, message_value, message_headers, ord)
), inserted AS (
    INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers)
    SELECT id, deadline, message_key, message_value, message_headers
    FROM batch
    WHERE deadline > now() + make_interval(secs => %(advance_ms)s / 1000.0)
    ORDER BY ord
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT b.ord,
       b.deadline <= now() + make_interval(secs => %(advance_ms)s / 1000.0) AS due,
       i.id IS NOT NULL AS inserted,
       EXISTS (SELECT 1 FROM chronos_messages m WHERE m.id = b.id) AS existed
FROM batch b
LEFT JOIN inserted i ON i.id = b.id
ORDER BY b.ord;

-- name: claim_due
-- Phase 1: claim up to `limit` rows due within `horizon_ms` (advance + lookahead), oldest first,
-- skipping rows another node is claiming and rows parked after `park_attempts` failed publishes;
-- return them with the time left until each deadline measured on the database clock.
WITH due AS (
    SELECT id
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
    ORDER BY deadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE chronos_messages m
SET readied_at = now(), readied_by = %(node_id)s::uuid
FROM due
WHERE m.id = due.id
RETURNING m.id, m.deadline, m.readied_at, m.message_key, m.message_value, m.message_headers,
          m.attempts, m.last_error, m.target_topic,
          (extract(epoch FROM (m.deadline - now())) * 1000)::double precision AS remaining_ms;

-- name: delete_fired
-- Phase 2: delete rows whose delivery succeeded, fenced by this node's claim (readied_by and
-- readied_at), so a row a peer re-claimed is never deleted. Returns the ids actually deleted.
DELETE FROM chronos_messages m
USING unnest(%(ids)s::text[], %(readied_ats)s::timestamptz[]) AS f(id, readied_at)
WHERE m.id = f.id
  AND m.readied_by = %(node_id)s::uuid
  AND m.readied_at = f.readied_at
RETURNING m.id;

-- name: release_claims
-- Give claimed rows back (shutdown, or a failed publish to retry), fenced by this node's claim;
-- `failed` adds one to the attempt counter; a non-null error is remembered as last_error.
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL,
    attempts = m.attempts + CASE WHEN %(failed)s THEN 1 ELSE 0 END,
    last_error = coalesce(r.error, m.last_error)
FROM unnest(%(ids)s::text[], %(readied_ats)s::timestamptz[], %(errors)s::text[])
     AS r(id, readied_at, error)
WHERE m.id = r.id
  AND m.readied_by = %(node_id)s::uuid
  AND m.readied_at = r.readied_at
RETURNING m.id, m.attempts;

-- name: release_node
-- Give back every row still claimed by this node (the end of a graceful shutdown).
UPDATE chronos_messages
SET readied_at = NULL, readied_by = NULL
WHERE readied_by = %(node_id)s::uuid
RETURNING id;

-- name: find_stuck
-- Failure detection, query 1: rows claimed longer ago than the hold time (oldest first).
SELECT id, readied_by::text AS readied_by, readied_at
FROM chronos_messages
WHERE readied_at IS NOT NULL
  AND readied_at < now() - make_interval(secs => %(hold_ms)s / 1000.0)
ORDER BY readied_at
LIMIT %(limit)s;

-- name: reset_stuck
-- Failure detection, query 2: compare-and-set reset of the rows found, only where the claim is
-- still the one observed. Returns the rows actually reset and the node suspected.
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL
FROM unnest(%(ids)s::text[], %(readied_bys)s::uuid[], %(readied_ats)s::timestamptz[])
     AS s(id, readied_by, readied_at)
WHERE m.id = s.id
  AND m.readied_by = s.readied_by
  AND m.readied_at = s.readied_at
RETURNING m.id, s.readied_by::text AS readied_by;

-- name: exists_ids
-- Which of these ids are waiting or ready.
SELECT id FROM chronos_messages WHERE id = ANY(%(ids)s::text[]);

-- name: ping
-- Liveness of the connection; also returns the database clock.
SELECT now() AS now;
