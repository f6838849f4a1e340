-- Runtime SQL of Chronos, as named blocks. Each block starts with `-- name: <name>` and a
-- one-line description. Parameters are psycopg placeholders (%(name)s; %(name)b: sent in binary,
-- for the hot paths' arrays); no SQL is ever built by string formatting. All deadline and hold-time comparisons use the database clock (now()).

-- name: enqueue_batch
-- Apply a consumed batch in one statement (ids distinct within the batch). Action "s" (schedule):
-- rows not yet due (deadline beyond now + advance) are inserted (an id already waiting or ready
-- is ignored); a series (`recurrences`: its rule, NULL for a one-shot message) is inserted even
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
-- reschedule_claimed, cancelled, cancel_claimed, cancel_unknown. A batch of schedules that are
-- all inserted returns no rows. The batch arrives as one binary array per column, in batch order
-- (ids, actions "s"|"r"|"c", deadlines (NULL for a cancel), raw keys and values, target topics,
-- tenants ('' : the default tenant), recurrences, expires_ms (chronosExpires; NULL: the default));
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
), batch AS (
    SELECT b.ord, b.id, coalesce(b.action, 's') AS action, b.deadline,
           b.message_key, b.message_value, h.message_headers, b.target_topic,
           coalesce(b.tenant, '') AS tenant, b.recurrence, b.expires_ms,
           b.recurrence IS NULL
               AND b.deadline <= now() + make_interval(secs => %(advance_ms)s / 1000.0) AS due,
           EXISTS (SELECT 1 FROM chronos_cancels c
                   WHERE c.id = b.id AND c.expires_at > now()) AS blocked
    FROM unnest(%(ids)b::text[], %(actions)b::text[], %(deadlines)b::timestamptz[],
                %(keys)b::bytea[], %(values)b::bytea[], %(topics)b::text[],
                %(tenants)b::text[], %(recurrences)b::text[], %(expires)b::int4[])
             WITH ORDINALITY AS b(id, action, deadline, message_key, message_value, target_topic,
                                  tenant, recurrence, expires_ms, ord)
    LEFT JOIN headers h ON h.message_ord = b.ord
), inserted AS (
    INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers,
                                  target_topic, tenant, recurrence, expires_ms)
    SELECT id, deadline, message_key, message_value, message_headers, target_topic, tenant,
           recurrence, expires_ms
    FROM batch
    WHERE action = 's' AND NOT due AND NOT blocked
    ORDER BY ord
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), rescheduled AS (
    INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers,
                                  target_topic, tenant, recurrence, expires_ms)
    SELECT id, deadline, message_key, message_value, message_headers, target_topic, tenant,
           recurrence, expires_ms
    FROM batch
    WHERE action = 'r' AND NOT blocked
    ORDER BY id
    ON CONFLICT (id) DO UPDATE
    SET deadline = excluded.deadline, message_key = excluded.message_key,
        message_value = excluded.message_value, message_headers = excluded.message_headers,
        target_topic = excluded.target_topic, tenant = excluded.tenant,
        recurrence = excluded.recurrence, expires_ms = excluded.expires_ms, attempts = 0,
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
    RETURNING m.id
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
ORDER BY b.ord;

-- name: claim_due
-- Phase 1: claim up to `limit` rows due within `horizon_ms` (advance + lookahead), oldest first,
-- skipping rows another node is claiming and parked rows, and stopping before the rows' bytes
-- (key + value + stored headers) pass `max_bytes` (the first row is taken whatever its size when
-- `first_always`); return them with the time left until each deadline on the database clock,
-- measured as late as possible (clock_timestamp(), not the statement start) so timers anchored
-- on arrival of the result never fire early and lose little precision. Walks the ready index
-- (unclaimed, not parked): parked rows at the head of the deadline order cost nothing.
-- `attempts < park_attempts` skips the rows a previous release parked by their attempts alone
-- (parked_at NULL). (octet_length of a bytea reads its length word, not the value.)
-- The claim is stamped now(), or the row's enqueued_at if later: a statement that began before a
-- reschedule committed and reaches its row after it claims the replacement, and its claim must
-- not look older than it (advance_fired would take the row for replaced and give it back).
-- The stored headers come back decoded, as two arrays in order: names (text) and raw values
-- (bytea, NULL kept); jsonpath keeps document order.
-- Paused tenants and target topics (`paused_tenants`, `paused_topics`: '' for the default tenant
-- and for the rows that name no topic; usually both empty, then the filter is two comparisons
-- with empty arrays) are skipped, except their rows already past their expiry limit (their own
-- expires_ms, else `max_lateness_ms`; NULL: none): those are claimed to be dead-lettered.
-- Paced catch-up (`catchup_after_ms` not NULL: CHRONOS_CATCHUP_RATE is set): rows overdue by more
-- than `catchup_after_ms` are claimed apart, at most `catchup_limit` of them (the node's share of
-- the rate, as tokens), so that an overdue backlog never takes the batch of the rows coming due
-- now (claimed up to `limit` as before); NULL: one oldest-first claim, the second part empty.
WITH on_time AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + coalesce(pg_column_size(message_headers), 0) AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR deadline < now() - make_interval(
               secs => coalesce(expires_ms, %(max_lateness_ms)s::int) / 1000.0))
      AND (%(catchup_after_ms)s::int IS NULL
           OR deadline > now() - make_interval(secs => %(catchup_after_ms)s::int / 1000.0))
    ORDER BY deadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), overdue AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + coalesce(pg_column_size(message_headers), 0) AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR deadline < now() - make_interval(
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
               + coalesce(pg_column_size(m.message_headers), 0) AS size
        FROM chronos_messages m
        WHERE m.tenant = t.tenant
          AND coalesce(m.readied_at, m.parked_at) IS NULL
          AND m.deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
          AND m.attempts < %(park_attempts)s
          AND (coalesce(m.target_topic, '') <> ALL(%(paused_topics)s::text[])
               OR m.deadline < now() - make_interval(
                   secs => coalesce(m.expires_ms, %(max_lateness_ms)s::int) / 1000.0))
        ORDER BY m.deadline
        LIMIT (SELECT rows FROM share)
        FOR UPDATE SKIP LOCKED
    ) c
), rest AS (
    SELECT id, deadline,
           coalesce(octet_length(message_key), 0) + coalesce(octet_length(message_value), 0)
           + coalesce(pg_column_size(message_headers), 0) AS size
    FROM chronos_messages
    WHERE readied_at IS NULL
      AND parked_at IS NULL
      AND deadline <= now() + make_interval(secs => %(horizon_ms)s / 1000.0)
      AND attempts < %(park_attempts)s
      AND id <> ALL(ARRAY(SELECT id FROM fair))
      AND (coalesce(tenant, '') <> ALL(%(paused_tenants)s::text[])
           AND coalesce(target_topic, '') <> ALL(%(paused_topics)s::text[])
           OR deadline < now() - make_interval(
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

-- name: pause
-- Pause a tenant or a target topic (kind 'tenant' | 'topic'); pausing it again keeps the first
-- pause's time and author. Returns the pause.
INSERT INTO chronos_pauses (kind, name, paused_by)
VALUES (%(kind)s, %(name)s, %(paused_by)s)
ON CONFLICT (kind, name) DO UPDATE SET kind = excluded.kind
RETURNING kind, name, paused_at, paused_by;

-- name: resume
-- Resume a paused tenant or target topic; returns the pause it ended (none: it was not paused).
DELETE FROM chronos_pauses
WHERE kind = %(kind)s AND name = %(name)s
RETURNING kind, name, paused_at, paused_by;

-- name: list_pauses
-- Every paused tenant and target topic (a handful of rows), oldest first: what the nodes' claims
-- skip, read by each node every second.
SELECT kind, name, paused_at, paused_by
FROM chronos_pauses
ORDER BY paused_at, kind, name;

-- name: set_limit
-- Limit a tenant or a target topic to `per_second` messages per second, cluster-wide (replacing
-- its limit, with the new time and author). Returns the limit.
INSERT INTO chronos_limits (kind, name, per_second, set_by)
VALUES (%(kind)s, %(name)s, %(per_second)s, %(set_by)s)
ON CONFLICT (kind, name) DO UPDATE
SET per_second = excluded.per_second, set_at = now(), set_by = excluded.set_by
RETURNING kind, name, per_second, set_at, set_by;

-- name: clear_limit
-- Remove the limit of a tenant or a target topic; returns it (none: it had none).
DELETE FROM chronos_limits
WHERE kind = %(kind)s AND name = %(name)s
RETURNING kind, name, per_second, set_at, set_by;

-- name: list_limits
-- Every rate limit (a handful of rows), by kind and name: read by each node every second.
SELECT kind, name, per_second, set_at, set_by
FROM chronos_limits
ORDER BY kind, name;

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
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[]) AS f(id, readied_at)
), target AS (
    SELECT m.id
    FROM chronos_messages m
    WHERE m.id = ANY(%(ids)b::text[])
      AND m.readied_by = %(node_id)s::uuid
      AND m.readied_at = ((SELECT claims FROM fence) -> m.id ->> 0)::timestamptz
    ORDER BY m.id
    FOR UPDATE
)
DELETE FROM chronos_messages m
WHERE m.id = ANY(ARRAY(SELECT id FROM target))
RETURNING m.id;

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
-- arrays, claim by claim. Returns the ids deleted, advanced or given back.
WITH fence AS (
    SELECT jsonb_object_agg(f.id, jsonb_build_array(f.readied_at, f.next)) AS claims
    FROM unnest(%(ids)b::text[], %(readied_ats)b::timestamptz[], %(nexts)b::timestamptz[])
         AS f(id, readied_at, next)
), target AS (
    SELECT m.id,
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
    RETURNING m.id
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
    RETURNING m.id
)
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL
WHERE m.id = ANY(ARRAY(SELECT id FROM target))
  AND NOT EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
RETURNING m.id;

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
    RETURNING m.id
)
UPDATE chronos_messages m
SET readied_at = NULL, readied_by = NULL
WHERE m.id = ANY(ARRAY(SELECT id FROM target))
  AND NOT EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
RETURNING m.id, ((SELECT claims FROM fence) -> m.id ->> 1) AS readied_by;

-- name: ping
-- Liveness of the connection; also returns the database clock.
SELECT now() AS now;

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
-- since the claim is void, as enqueue_batch's cancel does).
WITH target AS (
    SELECT id, readied_at FROM chronos_messages WHERE id = %(id)s FOR UPDATE
), deleted AS (
    DELETE FROM chronos_messages m
    USING target t
    WHERE m.id = t.id AND t.readied_at IS NULL
    RETURNING m.id
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

-- name: heartbeat
-- A node announces it is alive (insert on its first beat, then move heartbeat_at to now()),
-- with its fire rate over its last heartbeat interval (null: none to report).
INSERT INTO chronos_nodes (node_id, started_at, heartbeat_at, hostname, version,
                           fired_per_second)
VALUES (%(node_id)s::uuid, coalesce(%(started_at)s::timestamptz, now()), now(),
        %(hostname)s, %(version)s, %(fired_per_second)s::double precision)
ON CONFLICT (node_id) DO UPDATE
SET heartbeat_at = now(), hostname = EXCLUDED.hostname, version = EXCLUDED.version,
    fired_per_second = EXCLUDED.fired_per_second;

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

-- name: reset_lapsed_claims
-- Fast takeover: reset up to `limit` claims of nodes whose heartbeat is older than `window_ms`
-- (never the caller's own), oldest first; compare-and-set on the claim read. Claims of a node
-- with no heartbeat row are left to the hold time. Returns the rows reset and their node.
-- A row whose message was cancelled while it was claimed (a live cancel marker) is deleted
-- instead of given back: the cancel wins over the claim's end.
WITH lapsed AS (
    SELECT node_id
    FROM chronos_nodes
    WHERE heartbeat_at < now() - make_interval(secs => %(window_ms)s / 1000.0)
      AND node_id <> %(node_id)s::uuid
), taken AS (
    SELECT m.id, m.readied_by, m.readied_at
    FROM chronos_messages m
    JOIN lapsed l ON l.node_id = m.readied_by
    WHERE m.readied_at IS NOT NULL
    ORDER BY m.readied_at
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
), cancelled AS (
    DELETE FROM chronos_messages m
    USING taken t
    WHERE m.id = t.id
      AND EXISTS (SELECT 1 FROM chronos_cancels c
                  WHERE c.id = m.id AND c.expires_at > now())
    RETURNING m.id
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

-- name: configure_session
-- Session settings of a node's connection, set once when it opens: statement_timeout and
-- synchronous_commit (an empty value keeps the server's setting).
SELECT set_config('statement_timeout',
                  coalesce(nullif(%(statement_timeout)s::text, ''),
                           current_setting('statement_timeout')), false),
       set_config('synchronous_commit',
                  coalesce(nullif(%(synchronous_commit)s::text, ''),
                           current_setting('synchronous_commit')), false);

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
-- claimed series loses its rule (the occurrence in flight fires, none follows) and every one
-- gets a cancel marker, as a Kafka cancel leaves. Returns the counts, the last (deadline, id)
-- taken (the next batch's cursor) and the database clock.
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
    RETURNING m.id
), ended AS (
    UPDATE chronos_messages m
    SET recurrence = NULL
    FROM target t
    WHERE m.id = t.id AND t.readied_at IS NOT NULL AND m.recurrence IS NOT NULL
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
