-- Moving an input partition to another shard (docs/shards.md): what a node reads, and the
-- statements of `chronos shards move` (chronos.store.postgres.moves).
--
-- Runtime SQL of Chronos, as named blocks (one file a subject, all loaded together). Each
-- block starts with `-- name: <name>` and a one-line description. Parameters are psycopg
-- placeholders (%(name)s; %(name)b: sent in binary, for the hot paths' arrays); no SQL is ever
-- built by string formatting. All deadline and hold-time comparisons use the database clock
-- (now()).

-- name: partition_moves
-- The partitions moved away from the map, as this shard records them (a node's routing).
SELECT partition, shard, state, generation
FROM chronos_partition_moves
ORDER BY partition;

-- name: mark_partition_move
-- Write a partition's move (its shard and state) unless this shard has a later one already.
INSERT INTO chronos_partition_moves (partition, shard, state, generation)
VALUES (%(partition)s, %(shard)s, %(state)s, %(generation)s)
ON CONFLICT (partition) DO UPDATE
SET shard = excluded.shard, state = excluded.state, generation = excluded.generation,
    changed_at = now()
WHERE chronos_partition_moves.generation < excluded.generation;

-- name: lock_moves
-- The moves' advisory lock, exclusively until the transaction ends: every enqueue statement
-- under way (they hold it shared: chronos_partitions_refused) ends first, and none starts;
-- waited for 10 s at most (the statements queued behind it wait as long), then an error.
SELECT set_config('lock_timeout', '10s', true), pg_advisory_xact_lock(%(key)s);

-- name: try_lock_move
-- The lock of one move at a time (a session's, on shard 0): false when another move holds it.
SELECT pg_try_advisory_lock(%(key)s) AS taken;

-- name: unlock_move
-- Release the lock of one move at a time.
SELECT pg_advisory_unlock(%(key)s) AS released;

-- name: partition_rows_to_move
-- The next waiting rows of a partition by id (claimed rows fire where they are; locked rows are
-- being claimed), locked until the transaction that copies them ends.
SELECT id
FROM chronos_messages
WHERE input_partition = %(partition)s AND id > %(after)s AND readied_at IS NULL
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: partition_rows_left
-- How many rows of a partition this shard still holds, and how many of them are claimed.
SELECT count(*) AS left_rows, count(*) FILTER (WHERE readied_at IS NOT NULL) AS claimed
FROM chronos_messages
WHERE input_partition = %(partition)s;

-- name: delete_moved_rows
-- Delete the rows of a partition copied to its new shard (no history: they have not ended).
DELETE FROM chronos_messages
WHERE id = ANY(%(ids)s::text[]) AND input_partition = %(partition)s;

-- name: live_cancels
-- The cancel markers still live (a move copies them to the partition's new shard).
SELECT id, expires_at
FROM chronos_cancels
WHERE expires_at > now()
ORDER BY id;

-- name: copy_cancels
-- Keep cancel markers copied from another shard (the later expiry of the two wins).
INSERT INTO chronos_cancels (id, expires_at)
SELECT id, expires_at
FROM unnest(%(ids)s::text[], %(expires)s::timestamptz[]) AS c(id, expires_at)
ORDER BY id
ON CONFLICT (id) DO UPDATE
SET expires_at = greatest(chronos_cancels.expires_at, excluded.expires_at);

-- name: rows_without_partition
-- Waiting messages written without their input partition (before 0019): a move refuses them.
SELECT count(*) FROM chronos_messages WHERE input_partition IS NULL;
