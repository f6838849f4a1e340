-- Flow control: pauses and rate limits of tenants and target topics.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

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
