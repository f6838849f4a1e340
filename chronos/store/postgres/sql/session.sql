-- The connection: its session settings, and a ping.
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: configure_session
-- Session settings of a node's connection, set once when it opens: statement_timeout and
-- synchronous_commit (an empty value keeps the server's setting).
SELECT set_config('statement_timeout',
                  coalesce(nullif(%(statement_timeout)s::text, ''),
                           current_setting('statement_timeout')), false),
       set_config('synchronous_commit',
                  coalesce(nullif(%(synchronous_commit)s::text, ''),
                           current_setting('synchronous_commit')), false);

-- name: ping
-- Liveness of the connection; also returns the database clock.
SELECT now() AS now;
