-- Firing: the two-phase claim, then delete or advance what was delivered, or give it back.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: claim_due
-- Phase 1: claim up to `limit` rows due within `horizon_ms` (advance + lookahead), oldest first,
-- skipping rows another node is claiming and parked rows, and stopping before the rows' bytes
-- pass `max_bytes` (the first row is taken whatever its size when `first_always`). A row's bytes
-- are what the firing loop holds of it, as chronos.store.row_bytes counts them: key, value, and
-- each header's name (in characters) and raw value, not the stored JSON's size (a row without
-- headers skips the header walk). Return them with the time left until each deadline on the
-- database clock, measured as late as possible (clock_timestamp(), not the statement start) so
-- timers anchored on arrival of the result never fire early and lose little precision. Walks the
-- ready index (unclaimed, not parked): parked rows at the head of the deadline order cost nothing.
-- `attempts < park_attempts` skips the rows a previous release parked by their attempts alone
-- (parked_at NULL). (octet_length of a bytea reads its length word, not the value.)
-- The claim is stamped now(), or the row's enqueued_at if later: a statement that began before a
-- reschedule committed and reaches its row after it claims the replacement, and its claim must
-- not look older than it (advance_fired would take the row for replaced and give it back).
-- The stored headers come back decoded, as two arrays in order: names (text) and raw values
-- (bytea, NULL kept); jsonpath keeps document order.
-- Paused tenants and target topics (`paused_tenants`, `paused_topics`: '' for the default tenant
-- and for the rows that name no topic; usually both empty, then the filter is two comparisons
-- with empty arrays) are skipped, except their one-shot rows already past their expiry limit
-- (their own expires_ms, else `max_lateness_ms`; NULL: none): those are claimed to be
-- dead-lettered. A paused series waits whatever its lateness (its missed occurrences follow its
-- chronosMissed policy once resumed: the latest of them is not expired, and would fire).
-- Paced catch-up (`catchup_after_ms` not NULL: CHRONOS_CATCHUP_RATE is set): rows overdue by more
-- than `catchup_after_ms` are claimed apart, at most `catchup_limit` of them (the node's share of
-- the rate, as tokens), so that an overdue backlog never takes the batch of the rows coming due
-- now (claimed up to `limit` as before); NULL: one oldest-first claim, the second part empty.
WITH on_time AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + CASE WHEN message_headers IS NULL THEN 0 ELSE (
                 SELECT coalesce(sum(length(h ->> 'key')
                            + coalesce(octet_length(decode(h ->> 'value', 'base64')), 0)), 0)::int
                 FROM jsonb_path_query(message_headers, '$[*].keyvalue()') AS h) END AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR recurrence IS NULL AND deadline < now() - make_interval(
               secs => coalesce(expires_ms, %(max_lateness_ms)s::int) / 1000.0))
      AND (%(catchup_after_ms)s::int IS NULL
           OR deadline > now() - make_interval(secs => %(catchup_after_ms)s::int / 1000.0))
    ORDER BY deadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), overdue AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + CASE WHEN message_headers IS NULL THEN 0 ELSE (
                 SELECT coalesce(sum(length(h ->> 'key')
                            + coalesce(octet_length(decode(h ->> 'value', 'base64')), 0)), 0)::int
                 FROM jsonb_path_query(message_headers, '$[*].keyvalue()') AS h) END AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR recurrence IS NULL AND deadline < now() - make_interval(
               secs => coalesce(expires_ms, %(max_lateness_ms)s::int) / 1000.0))
      AND deadline <= now() - make_interval(secs => %(catchup_after_ms)s::int / 1000.0)
    ORDER BY deadline
    LIMIT %(catchup_limit)s
    FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT id, deadline, size FROM on_time
    UNION ALL
    SELECT id, deadline, size FROM overdue
), due AS (
    SELECT id
    FROM (SELECT id, size, sum(size) OVER (ORDER BY deadline, id) AS running
          FROM candidates) c
    WHERE running <= %(max_bytes)s::bigint OR (running = size AND %(first_always)s::boolean)
)
UPDATE chronos_messages m
SET readied_at = greatest(now(), m.enqueued_at), readied_by = %(node_id)s::uuid
FROM due
WHERE m.id = due.id
RETURNING m.id, extract(epoch FROM m.deadline)::double precision AS deadline_epoch, m.readied_at,
          m.message_key, m.message_value,
          ARRAY(SELECT jsonb_array_elements_text(
                    jsonb_path_query_array(m.message_headers, '$[*].keyvalue().key'))
          ) AS header_names,
          ARRAY(SELECT decode(v, 'base64')
                FROM jsonb_array_elements_text(
                    jsonb_path_query_array(m.message_headers, '$[*].*')) AS v
          ) AS header_values,
          m.attempts, m.last_error, m.target_topic,
          (extract(epoch FROM (m.deadline - clock_timestamp())) * 1000)::double precision,
          m.tenant, m.recurrence, m.expires_ms;

-- name: claim_due_fair
-- Phase 1 under overload (the firing loop runs it while its previous claim came back
-- full, or while a tenant holds its share of the node's claim-ahead budget): claim_due, with the
-- batch shared between tenants. It visits at most `tenants` known tenants (chronos_tenants, in
-- name order after `cursor`, wrapping round: a rotating window, so thousands of tenants are all
-- visited within a few claims), each with two LIMIT-ed probes of the (tenant, deadline) ready
-- index: has it a due row; then its oldest `limit` / (visited tenants with due rows) due rows,
-- FOR UPDATE SKIP LOCKED. The probes say "ready" as that index's predicate does
-- (coalesce(readied_at, parked_at) IS NULL): the deadline ready index cannot serve them, so no
-- statistics can make a probe walk the flood's rows filtering on the tenant; ORDER BY deadline
-- keeps a sequential scan out of reach too. The rest of the batch is filled oldest first, as
-- claim_due (work conserving: a flood drains at full speed), unless `fill` is false (a tenant is
-- excluded: the fill would walk its rows). Tenants in `exclude_tenants` are not visited. Rows of a release
-- before tenants (tenant NULL) are claimed by the fill only. The byte budget counts the visited
-- tenants' rows first. The cost is bounded by `tenants` index probes plus the fill, whatever the
-- number of rows or tenants. Rows are updated through `id = ANY(...)` (primary key in any plan).
-- Paused tenants and topics are skipped as claim_due skips them (a paused tenant is not visited:
-- its expired rows are claimed by the fill).
-- After the claimed rows comes one row whose id is NULL and whose tenant column is the cursor of
-- the next fair claim (the last tenant visited).
WITH visit AS (
    SELECT w.tenant, row_number() OVER (ORDER BY w.lap, w.tenant) AS pos
    FROM ((SELECT t.tenant, 0 AS lap
           FROM chronos_tenants t
           WHERE t.tenant > %(cursor)s::text
           ORDER BY t.tenant
           LIMIT %(tenants)s)
          UNION ALL
          (SELECT t.tenant, 1 AS lap
           FROM chronos_tenants t
           WHERE t.tenant <= %(cursor)s::text
           ORDER BY t.tenant
           LIMIT %(tenants)s)
          LIMIT %(tenants)s) w
), due_tenants AS (
    SELECT v.tenant
    FROM visit v
    CROSS JOIN LATERAL (
        SELECT 1
        FROM chronos_messages m
        WHERE m.tenant = v.tenant
          AND coalesce(m.readied_at, m.parked_at) IS NULL
          AND m.deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
        ORDER BY m.deadline
        LIMIT 1  -- a probe per tenant, never a join over the rows (LIMIT keeps it a subquery)
    ) d
    WHERE v.tenant <> ALL(%(exclude_tenants)s::text[])
      AND v.tenant <> ALL(%(paused_tenants)s::text[])
), share AS (
    SELECT greatest(1, %(limit)s / greatest(1, count(*)))::bigint AS rows FROM due_tenants
), fair AS (
    SELECT c.id, c.deadline, c.size
    FROM due_tenants t
    CROSS JOIN LATERAL (
        SELECT m.id, m.deadline,
               coalesce(octet_length(m.message_key), 0)
               + coalesce(octet_length(m.message_value), 0)
               + CASE WHEN m.message_headers IS NULL THEN 0 ELSE (
                     SELECT coalesce(sum(length(h ->> 'key') + coalesce(
                                octet_length(decode(h ->> 'value', 'base64')), 0)), 0)::int
                     FROM jsonb_path_query(m.message_headers, '$[*].keyvalue()') AS h) END AS size
        FROM chronos_messages m
        WHERE m.tenant = t.tenant
          AND coalesce(m.readied_at, m.parked_at) IS NULL
          AND m.deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
          AND m.attempts < %(park_attempts)s
          AND (coalesce(m.target_topic, '') <> ALL(%(paused_topics)s::text[])
               OR m.recurrence IS NULL AND m.deadline < now() - make_interval(
                   secs => coalesce(m.expires_ms, %(max_lateness_ms)s::int) / 1000.0))
        ORDER BY m.deadline
        LIMIT (SELECT rows FROM share)
        FOR UPDATE SKIP LOCKED
    ) c
), rest AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + CASE WHEN message_headers IS NULL THEN 0 ELSE (
                 SELECT coalesce(sum(length(h ->> 'key')
                            + coalesce(octet_length(decode(h ->> 'value', 'base64')), 0)), 0)::int
                 FROM jsonb_path_query(message_headers, '$[*].keyvalue()') AS h) END AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND id NOT IN (SELECT id FROM fair)  -- a hashed subplan: one probe a row walked
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR recurrence IS NULL AND deadline < now() - make_interval(
               secs => coalesce(expires_ms, %(max_lateness_ms)s::int) / 1000.0))
      AND %(fill)s::boolean
    ORDER BY deadline
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fair))
    FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT 0 AS part, id, deadline, size FROM fair
    UNION ALL
    SELECT 1 AS part, id, deadline, size FROM rest
), due AS (
    SELECT id
    FROM (SELECT id, size, sum(size) OVER (ORDER BY part, deadline, id) AS running
          FROM candidates) c
    WHERE running <= %(max_bytes)s::bigint OR (running = size AND %(first_always)s::boolean)
), claimed AS (
    UPDATE chronos_messages m
    SET readied_at = greatest(now(), m.enqueued_at), readied_by = %(node_id)s::uuid
    WHERE m.id = ANY(ARRAY(SELECT id FROM due))
    RETURNING m.id, extract(epoch FROM m.deadline)::double precision AS deadline_epoch,
              m.readied_at, m.message_key, m.message_value,
              ARRAY(SELECT jsonb_array_elements_text(
                        jsonb_path_query_array(m.message_headers, '$[*].keyvalue().key'))
              ) AS header_names,
              ARRAY(SELECT decode(v, 'base64')
                    FROM jsonb_array_elements_text(
                        jsonb_path_query_array(m.message_headers, '$[*].*')) AS v
              ) AS header_values,
              m.attempts, m.last_error, m.target_topic,
              (extract(epoch FROM (m.deadline - clock_timestamp())) * 1000)::double precision
                  AS remaining_ms,
              m.tenant, m.recurrence, m.expires_ms
)
SELECT * FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       coalesce((SELECT v.tenant FROM visit v ORDER BY v.pos DESC LIMIT 1), %(cursor)s::text),
       NULL, NULL;

-- name: several_tenants
-- More than one tenant is known (at most two rows of chronos_tenants read): the firing loop shares
-- its claim-ahead budget between tenants only then.
SELECT count(*) > 1 AS several FROM (SELECT 1 FROM chronos_tenants LIMIT 2) t;

-- name: delete_fired
-- Phase 2: delete rows whose delivery succeeded, fenced by this node's claim (readied_by and
-- readied_at), so a row a peer re-claimed is never deleted. Returns the ids actually deleted.
-- Like every batch write: the table is reached only through `id = ANY(ids)` (primary key, in
-- any plan, statistics or not), each row's fence is looked up in a JSON object keyed by id that
-- the server builds once from the input arrays (no join with the input list, which a generic plan
-- turns into ids x rows comparisons), and the rows are locked in id order (two batch writes on
-- overlapping rows cannot deadlock). `ids`, `readied_ats`: binary arrays, claim by claim.
-- With `history`, the same statement writes each deleted row's history record (chronos_history:
-- no round trip of its own), read by the claim's position (the fence's second entry) from binary
-- arrays claim by claim, all of fixed width (a subscript is O(1)): `outcome_ix` (1-based into
-- `outcome_names`; NULL: no record), `topic_ix` (into `topic_names`), `partitions`, `offsets`
-- (the delivered record), `lateness` (ms) and `reason_ix` (into `reason_names`); the few distinct
-- names are sent once. Without history the arrays are empty and nothing is read.
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at, f.pos)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[]) WITH ORDINALITY
         AS f(id, readied_at, pos)
), target AS (
    SELECT m.id
    FROM chronos_messages m
    WHERE m.id = ANY(%(ids)b::text[])
      AND m.readied_by = %(node_id)s::uuid
      AND m.readied_at = ((SELECT claims FROM fence) -> m.id ->> 0)::timestamptz
    ORDER BY m.id
    FOR UPDATE
), gone AS (
    DELETE FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM target))
    RETURNING m.id, m.tenant, m.deadline, m.attempts, m.recurrence,
              CASE WHEN %(history)s::boolean
                   THEN ((SELECT claims FROM fence) -> m.id ->> 1)::int END AS pos,
              CASE WHEN %(history)s::boolean THEN m.message_key END AS message_key
), recorded AS (
    INSERT INTO chronos_history (id, tenant, outcome, deadline, topic, kafka_partition,
                                 kafka_offset, lateness_ms, node, attempt, reason, recurring,
                                 message_key)
    SELECT g.id, coalesce(g.tenant, ''),
           (%(outcome_names)s::text[])[(%(outcome_ix)b::int2[])[g.pos]], g.deadline,
           (%(topic_names)s::text[])[(%(topic_ix)b::int2[])[g.pos]],
           (%(partitions)b::int4[])[g.pos], (%(offsets)b::int8[])[g.pos],
           (%(lateness)b::int4[])[g.pos], %(node_id)s::uuid, least(g.attempts + 1, 32767),
           (%(reason_names)s::text[])[(%(reason_ix)b::int2[])[g.pos]], g.recurrence IS NOT NULL,
           g.message_key
    FROM gone g
    WHERE %(history)s::boolean AND (%(outcome_ix)b::int2[])[g.pos] IS NOT NULL
)
SELECT id FROM gone;

-- name: advance_fired
-- Phase 2 of a batch holding occurrences of series ("delete or advance"; the firing loop runs it
-- for every such batch, even when no claim has a next occurrence): delete_fired, except that a
-- claim given a next occurrence (`nexts`; NULL: the series ends, or a one-shot message) moves its
-- row to it, unclaimed again with a fresh attempts count, instead of deleting it: one statement,
-- so a crash before it repeats the fired occurrence and never skips one. A row replaced by a
-- reschedule while claimed (enqueued_at after readied_at: it is a new message) is given back
-- unchanged, neither advanced nor deleted, whether or not the fired occurrence had a next one.
-- A row cancelled while claimed (a live cancel marker) is deleted, replaced or not: the cancel
-- wins, as in release_claims, reset_stuck and release_node.
-- Same fence, index use and lock order as delete_fired; `ids`, `readied_ats`, `nexts`: binary
-- arrays, claim by claim. Returns the ids deleted, advanced or given back. With `history`, each
-- occurrence given an outcome writes its record as delete_fired does (a series' record names the
-- occurrence it advanced to).
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at, f.next, f.pos)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[], %(nexts)b::timestamptz[])
         WITH ORDINALITY AS f(id, readied_at, next, pos)
), target AS (
    SELECT m.id, m.tenant, m.deadline, m.attempts, m.recurrence,
           CASE WHEN %(history)s::boolean THEN m.message_key END AS message_key,
           m.enqueued_at > m.readied_at AS replaced,
           ((SELECT claims FROM fence) -> m.id ->> 2)::int AS pos,
           NOT EXISTS (SELECT 1 FROM chronos_cancels c
                       WHERE c.id = m.id AND c.expires_at > now())
           AND (m.enqueued_at > m.readied_at  -- replaced
                OR ((SELECT claims FROM fence) -> m.id ->> 1) IS NOT NULL
                   AND m.recurrence IS NOT NULL) AS kept
    FROM chronos_messages m
    WHERE m.id = ANY(%(ids)b::text[])
      AND m.readied_by = %(node_id)s::uuid
      AND m.readied_at = ((SELECT claims FROM fence) -> m.id ->> 0)::timestamptz
    ORDER BY m.id
    FOR UPDATE
), advanced AS (
    UPDATE chronos_messages m
    SET deadline = CASE WHEN m.enqueued_at > m.readied_at THEN m.deadline  -- replaced
                        ELSE ((SELECT claims FROM fence) -> m.id ->> 1)::timestamptz END,
        readied_at = NULL, readied_by = NULL,
        attempts = CASE WHEN m.enqueued_at > m.readied_at THEN m.attempts ELSE 0 END,
        last_error = CASE WHEN m.enqueued_at > m.readied_at THEN m.last_error END
    WHERE m.id = ANY(ARRAY(SELECT id FROM target WHERE kept))
    RETURNING m.id
), deleted AS (
    DELETE FROM chronos_messages m
    WHERE m.id = ANY(ARRAY(SELECT id FROM target WHERE NOT kept))
    RETURNING m.id
), recorded AS (
    INSERT INTO chronos_history (id, tenant, outcome, deadline, topic, kafka_partition,
                                 kafka_offset, lateness_ms, node, attempt, reason, recurring,
                                 next_deadline, message_key)
    SELECT t.id, coalesce(t.tenant, ''),
           (%(outcome_names)s::text[])[(%(outcome_ix)b::int2[])[t.pos]], t.deadline,
           (%(topic_names)s::text[])[(%(topic_ix)b::int2[])[t.pos]],
           (%(partitions)b::int4[])[t.pos], (%(offsets)b::int8[])[t.pos],
           (%(lateness)b::int4[])[t.pos], %(node_id)s::uuid, least(t.attempts + 1, 32767),
           (%(reason_names)s::text[])[(%(reason_ix)b::int2[])[t.pos]], t.recurrence IS NOT NULL,
           CASE WHEN t.kept AND NOT t.replaced
                THEN ((SELECT claims FROM fence) -> t.id ->> 1)::timestamptz END,
           t.message_key
    FROM target t
    WHERE %(history)s::boolean AND (%(outcome_ix)b::int2[])[t.pos] IS NOT NULL
)
SELECT id FROM advanced
UNION ALL
SELECT id FROM deleted;

-- name: release_claims
-- Give claimed rows back (shutdown, or a failed publish to retry), fenced by this node's claim;
-- `failed` adds one to the attempt counter; a non-null error is remembered as last_error; a row
-- whose attempts reach `park_attempts` (NULL: never) is parked (parked_at: out of the claim).
-- Index-driven and locked in id order like delete_fired; `ids`, `readied_ats`, `errors`: binary
-- arrays, claim by claim.
-- A row whose message was cancelled while it was claimed (a live cancel marker) is deleted
-- instead of given back: the cancel wins over the claim's end.
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at, f.error)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[], %(errors)b::text[])
         AS f(id, readied_at, error)
), target AS (
    SELECT m.id
    FROM chronos_messages m
    WHERE m.id = ANY(%(ids)b::text[])
      AND m.readied_by = %(node_id)s::uuid
      AND m.readied_at = ((SELECT claims FROM fence) -> m.id ->> 0)::timestamptz
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
SET readied_at = NULL, readied_by = NULL,
    attempts = m.attempts + CASE WHEN %(failed)s THEN 1 ELSE 0 END,
    last_error = coalesce((SELECT claims FROM fence) -> m.id ->> 1, m.last_error),
    parked_at = CASE
        WHEN m.parked_at IS NULL AND %(failed)s
             AND m.attempts + 1 >= %(park_attempts)s::int THEN now()
        ELSE m.parked_at
    END
WHERE m.id = ANY(ARRAY(SELECT id FROM target))
  AND NOT EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
RETURNING m.id, m.attempts;

-- name: park_exhausted
-- Stamp parked_at on unclaimed rows parked by their attempts alone (by a release before
-- parked_at existed), so they leave the ready index the claim walks; failed-publish index.
UPDATE chronos_messages
SET parked_at = now()
WHERE parked_at IS NULL
  AND attempts > 0
  AND attempts >= %(park_attempts)s
  AND readied_at IS NULL
RETURNING id;

-- name: release_node
-- Give back every row still claimed by this node process (the end of a graceful shutdown):
-- fenced by the process's start on the database clock (`since`; NULL: every claim of the id),
-- so a process sharing the node id never releases another's claims; claimed_by index.
-- A row whose message was cancelled while it was claimed (a live cancel marker) is deleted
-- instead of given back: the cancel wins over the claim's end.
WITH target AS (
    SELECT id
    FROM chronos_messages
    WHERE readied_by = %(node_id)s::uuid
      AND readied_at >= coalesce(%(since)s::timestamptz, '-infinity')
    ORDER BY id
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
RETURNING m.id;
