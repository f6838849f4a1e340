-- Recovery: claims held past the hold time, or by nodes whose heartbeat lapsed, reset for a peer.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: find_stuck
-- Failure detection, query 1: rows claimed longer ago than the hold time (oldest first), except
-- the claims of this very process (`own_node` since `own_since`; NULL since: every claim of
-- that node id): a node never suspects itself; its firing loop gives its expired claims back.
SELECT id, readied_by::text AS readied_by, readied_at
FROM chronos_messages
WHERE readied_at IS NOT NULL
  AND readied_at < now() - make_interval(secs => %(hold_ms)s / 1000.0)
  AND (%(own_node)s::uuid IS NULL OR readied_by <> %(own_node)s::uuid
       OR readied_at < coalesce(%(own_since)s::timestamptz, '-infinity'))
ORDER BY readied_at
LIMIT %(limit)s;

-- name: reset_stuck
-- Failure detection, query 2: compare-and-set reset of the rows found, only where the claim is
-- still the one observed. Returns the rows actually reset and the node suspected.
-- Index-driven and locked in id order like delete_fired; `ids`, `readied_ats`, `readied_bys`:
-- binary arrays, row by row.
-- A row whose message was cancelled while it was claimed (a live cancel marker) is deleted
-- instead of given back: the cancel wins over the claim's end.
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at, f.readied_by)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[], %(readied_bys)b::text[])
         AS f(id, readied_at, readied_by)
), target AS (
    SELECT m.id
    FROM chronos_messages m
    WHERE m.id = ANY(%(ids)b::text[])
      AND m.readied_at = ((SELECT claims FROM fence) -> m.id ->> 0)::timestamptz
      AND m.readied_by = ((SELECT claims FROM fence) -> m.id ->> 1)::uuid
    ORDER BY m.id
    FOR UPDATE
), cancelled AS (
    DELETE FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM target))
      AND EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
    RETURNING m.id, m.tenant, m.deadline, m.recurrence, m.message_key
), recorded AS (  -- with `history`: the message its cancel ended as its claim ended
    INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, recurring, message_key)
    SELECT id, coalesce(tenant, ''), 'cancelled', deadline, 'cancelled while claimed',
           recurrence IS NOT NULL, message_key
    FROM cancelled
    WHERE %(history)s::boolean
)
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL
WHERE m.id = ANY(ARRAY(SELECT id FROM target))
  AND NOT EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
RETURNING m.id, ((SELECT claims FROM fence) -> m.id ->> 1) AS readied_by;

-- name: reset_lapsed_claims
-- Fast takeover: reset up to `limit` claims of nodes whose heartbeat is older than `window_ms`
-- (never the caller's own), oldest first; compare-and-set on the claim read. Claims of a node
-- with no heartbeat row are left to the hold time. Returns the rows reset and their node.
-- A row whose message was cancelled while it was claimed (a live cancel marker) is deleted
-- instead of given back: the cancel wins over the claim's end.
-- Each lapsed node's claims are read through the claimed-by index (node, claimed at): the cost
-- is their claims, whatever the live nodes hold (a join walking every claimed row would cost a
-- burst's in-flight rows on every round, found or not, while a stale node row lapses).
WITH lapsed AS (
    SELECT node_id
    FROM chronos_nodes
    WHERE heartbeat_at < now() - make_interval(secs => %(window_ms)s / 1000.0)
      AND node_id <> %(node_id)s::uuid
), taken AS (
    SELECT c.id, c.readied_by, c.readied_at
    FROM lapsed l
    CROSS JOIN LATERAL (
        SELECT m.id, m.readied_by, m.readied_at
        FROM chronos_messages m
        WHERE m.readied_by = l.node_id
          AND m.readied_at IS NOT NULL
        ORDER BY m.readied_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY c.readied_at
    LIMIT %(limit)s
), cancelled AS (
    DELETE FROM chronos_messages m
    USING taken t
    WHERE m.id = t.id
      AND EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
    RETURNING m.id, m.tenant, m.deadline, m.recurrence, m.message_key
), recorded AS (  -- with `history`: the message its cancel ended as its claim ended
    INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, recurring, message_key)
    SELECT id, coalesce(tenant, ''), 'cancelled', deadline, 'cancelled while claimed',
           recurrence IS NOT NULL, message_key
    FROM cancelled
    WHERE %(history)s::boolean
)
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL
FROM taken t
WHERE m.id = t.id
  AND m.readied_by = t.readied_by
  AND m.readied_at = t.readied_at
  AND NOT EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
RETURNING m.id, t.readied_by::text AS readied_by;
