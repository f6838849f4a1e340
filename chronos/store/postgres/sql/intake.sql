-- Intake: a consumed batch applied in one statement.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: enqueue_batch
-- Apply a consumed batch in one statement (ids distinct within the batch). Action "s" (schedule):
-- rows not yet due (deadline beyond now + advance) are inserted (an id already waiting or ready
-- is ignored), and so are due ones that flow control holds: a paused or rate-limited tenant or
-- target topic (`output_topic` names the rows that name none), or a deadline the paced catch-up
-- paces (overdue by more than `catchup_after_ms`; NULL: no catch-up) - they wait in the table
-- and the claims pace them; a series (`recurrences`: its rule, NULL for a one-shot message) is inserted even
-- when its first occurrence is due (the claim fires it, and advances the row). "r" (reschedule): inserted, or replacing the deadline, key, value, headers and
-- topic of the unclaimed row with that id (a parked one is given a fresh start); a claimed row is
-- left alone, unless it is a series: then it is replaced all the same, its claim kept (the
-- occurrence in flight fires as it was; advance_fired sees enqueued_at after the claim and
-- gives the replaced row back instead of advancing it). "Replaced while claimed" is decided by
-- the row lock alone, never by two clocks: a replacement of a claimed row is stamped after its
-- claim (enqueued_at > readied_at), and a claim is never stamped before the enqueue of the row it
-- claims (claim_due).
-- "c" (cancel): the unclaimed row with that id is deleted and a cancel marker kept
-- until now + cancel_ttl_ms (a claimed series loses its rule, and a replacement since the claim
-- is void: the claimed occurrence is its last). A schedule or reschedule whose id has a live marker is dropped.
-- Up to 1,000 expired markers are purged on the way (expires index, skipping locked ones).
-- `new_tenants` (the batch's tenants this node has not written yet; usually empty) join the known
-- tenants the fair claim visits (chronos_tenants).
-- Only the exceptions come back, by their 1-based position in the batch, with what happened:
-- fire_now, due_duplicate, duplicate, blocked (a live cancel marker), rescheduled,
-- reschedule_claimed, cancelled, cancel_claimed, cancel_unknown, and moving: with `fenced`
-- (several shards), a message of an input partition this shard does not take (being moved, or
-- moved to another shard: chronos_partitions_refused, docs/shards.md) is not applied at all.
-- A batch of schedules that are all inserted returns no rows. The batch arrives as one binary array per column, in batch order
-- (ids, actions "s"|"r"|"c", deadlines (NULL for a cancel), raw keys and values, target topics,
-- tenants ('' : the default tenant), recurrences, expires_ms (chronosExpires; NULL: the default),
-- input partitions (NULL: not from Kafka));
-- headers flattened: header_rows (each header's 1-based message position), header_names and raw
-- header_values, in order. The server builds the stored header document from them:
-- [{"name": "<base64 value>" | null}, ...] (base64 without line breaks), NULL when none.
WITH headers AS (
    SELECT h.message_ord,
           jsonb_agg(jsonb_build_object(h.name, translate(encode(h.value, 'base64'), E'\n', ''))
                     ORDER BY h.ord) AS message_headers
    FROM unnest(%(header_rows)b::int[], %(header_names)b::text[], %(header_values)b::bytea[])
         WITH ORDINALITY AS h(message_ord, name, value, ord)
    GROUP BY h.message_ord
), fence AS MATERIALIZED (
    -- with several shards: the partitions this shard does not take (being moved, or moved away)
    SELECT CASE WHEN %(fenced)s::boolean THEN chronos_partitions_refused()
                ELSE ARRAY[]::int4[] END AS refused
), given AS (
    SELECT b.ord, b.id, coalesce(b.action, 's') AS action, b.deadline, b.input_partition,
           (b.input_partition IS NOT NULL AND b.input_partition = ANY(f.refused)) AS refused,
           b.message_key, b.message_value, h.message_headers, b.target_topic,
           coalesce(b.tenant, '') AS tenant, b.recurrence, b.expires_ms,
           b.recurrence IS NULL
               AND b.deadline <= now() + make_interval(secs => %(advance_ms)s / 1000.0)
               AND (%(catchup_after_ms)s::int IS NULL
                    OR b.deadline > now() - make_interval(
                        secs => %(catchup_after_ms)s::int / 1000.0))
               AND NOT EXISTS (
                   SELECT 1 FROM chronos_pauses p
                   WHERE p.kind = 'tenant' AND p.name = coalesce(b.tenant, '')
                      OR p.kind = 'topic'
                         AND p.name = coalesce(b.target_topic, %(output_topic)s::text))
               AND NOT EXISTS (
                   SELECT 1 FROM chronos_limits l
                   WHERE l.kind = 'tenant' AND l.name = coalesce(b.tenant, '')
                      OR l.kind = 'topic'
                         AND l.name = coalesce(b.target_topic, %(output_topic)s::text)) AS due,
           EXISTS (SELECT 1 FROM chronos_cancels c
                   WHERE c.id = b.id AND c.expires_at > now()) AS blocked
    FROM unnest(%(ids)b::text[], %(actions)b::text[], %(deadlines)b::timestamptz[],
                %(keys)b::bytea[], %(values)b::bytea[], %(topics)b::text[],
                %(tenants)b::text[], %(recurrences)b::text[], %(expires)b::int4[],
                %(partitions)b::int4[])
             WITH ORDINALITY AS b(id, action, deadline, message_key, message_value, target_topic,
                                  tenant, recurrence, expires_ms, input_partition, ord)
    CROSS JOIN fence f
    LEFT JOIN headers h ON h.message_ord = b.ord
), batch AS NOT MATERIALIZED (
    SELECT * FROM given WHERE NOT refused
), inserted AS (
    INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers,
                                  target_topic, tenant, recurrence, expires_ms, input_partition)
    SELECT id, deadline, message_key, message_value, message_headers, target_topic, tenant,
           recurrence, expires_ms, input_partition
    FROM batch
    WHERE action = 's' AND NOT due AND NOT blocked
    ORDER BY ord
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), rescheduled AS (
    INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers,
                                  target_topic, tenant, recurrence, expires_ms, input_partition)
    SELECT id, deadline, message_key, message_value, message_headers, target_topic, tenant,
           recurrence, expires_ms, input_partition
    FROM batch
    WHERE action = 'r' AND NOT blocked
    ORDER BY id
    ON CONFLICT (id) DO UPDATE
    SET deadline = excluded.deadline, message_key = excluded.message_key,
        message_value = excluded.message_value, message_headers = excluded.message_headers,
        target_topic = excluded.target_topic, tenant = excluded.tenant,
        recurrence = excluded.recurrence, expires_ms = excluded.expires_ms,
        input_partition = excluded.input_partition, attempts = 0,
        last_error = NULL, parked_at = NULL,
        enqueued_at = CASE WHEN chronos_messages.readied_at IS NULL THEN clock_timestamp()
                           ELSE greatest(clock_timestamp(),
                                         chronos_messages.readied_at + interval '1 microsecond')
                      END
    WHERE chronos_messages.readied_at IS NULL OR chronos_messages.recurrence IS NOT NULL
    RETURNING id
), known_tenants AS (
    INSERT INTO chronos_tenants (tenant)
    SELECT t FROM unnest(%(new_tenants)s::text[]) AS t ORDER BY t
    ON CONFLICT (tenant) DO NOTHING
), cancel_target AS (
    SELECT m.id, m.readied_at
    FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM batch WHERE action = 'c'))
    ORDER BY m.id
    FOR UPDATE
), cancelled AS (
    DELETE FROM chronos_messages m
    USING cancel_target t
    WHERE m.id = t.id AND t.readied_at IS NULL
    RETURNING m.id, m.tenant, m.deadline, m.recurrence, m.message_key
), replaced AS (
    -- the waiting rows a reschedule replaces, as they were (the statement's snapshot)
    SELECT m.id, m.tenant, m.deadline, m.recurrence, m.message_key
    FROM chronos_messages m
    WHERE %(history)s::boolean
      AND m.id = ANY(ARRAY(SELECT id FROM batch WHERE action = 'r' AND NOT blocked))
      AND m.readied_at IS NULL
), recorded AS (
    -- with `history`: the cancelled messages' records (by a Kafka record) and the replaced ones'
    INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, ended_by, recurring,
                                 message_key)
    SELECT id, coalesce(tenant, ''), 'cancelled', deadline, 'chronosAction: cancel', 'kafka',
           recurrence IS NOT NULL, message_key
    FROM cancelled
    WHERE %(history)s::boolean
    UNION ALL
    SELECT r.id, coalesce(r.tenant, ''), 'replaced', r.deadline, 'chronosAction: reschedule',
           'kafka', r.recurrence IS NOT NULL, r.message_key
    FROM replaced r
    WHERE EXISTS (SELECT 1 FROM rescheduled x WHERE x.id = r.id)
), ended AS (
    -- a series whose occurrence is claimed: that occurrence fires, none follows (its row ends
    -- as a one-shot message, and a replacement of it since the claim is void; a write on the
    -- row, so an advance waiting on its lock sees it: the markers it reads predate the cancel)
    UPDATE chronos_messages m
    SET recurrence = NULL, enqueued_at = least(m.enqueued_at, m.readied_at)
    FROM cancel_target t
    WHERE m.id = t.id AND t.readied_at IS NOT NULL
      AND (m.recurrence IS NOT NULL OR m.enqueued_at > m.readied_at)
    RETURNING m.id
), marked AS (
    INSERT INTO chronos_cancels (id, expires_at)
    SELECT id, now() + make_interval(secs => %(cancel_ttl_ms)s / 1000.0)
    FROM batch
    WHERE action = 'c'
    ORDER BY id
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING id
), purged AS (
    DELETE FROM chronos_cancels
    WHERE id = ANY(ARRAY(
        SELECT id FROM chronos_cancels
        WHERE expires_at <= now()
          AND id <> ALL(ARRAY(SELECT id FROM batch WHERE action = 'c'))
        ORDER BY expires_at
        LIMIT 1000
        FOR UPDATE SKIP LOCKED))
    RETURNING id
)
SELECT b.ord,
       CASE
           WHEN b.action = 'c' THEN
               CASE WHEN EXISTS (SELECT 1 FROM cancelled x WHERE x.id = b.id) THEN 'cancelled'
                    WHEN EXISTS (SELECT 1 FROM cancel_target x WHERE x.id = b.id)
                        THEN 'cancel_claimed'
                    ELSE 'cancel_unknown' END
           WHEN b.blocked THEN 'blocked'
           WHEN b.action = 'r' THEN
               CASE WHEN EXISTS (SELECT 1 FROM rescheduled x WHERE x.id = b.id)
                        THEN 'rescheduled'
                    ELSE 'reschedule_claimed' END
           WHEN b.due THEN
               CASE WHEN EXISTS (SELECT 1 FROM chronos_messages m WHERE m.id = b.id)
                        THEN 'due_duplicate'
                    ELSE 'fire_now' END
           ELSE 'duplicate'
       END AS outcome
FROM batch b
WHERE b.action <> 's' OR b.blocked OR b.due
   OR NOT EXISTS (SELECT 1 FROM inserted i WHERE i.id = b.id)
UNION ALL
SELECT g.ord, 'moving' FROM given g WHERE g.refused
ORDER BY 1;
