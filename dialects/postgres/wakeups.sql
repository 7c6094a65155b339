-- The statement of logical wake-ups (wakeups.go), in the format of
-- queries.sql. It is kept apart because it belongs to the listener, which
-- runs beside the relay's statements, not among them.

-- name: WakeupsServer
-- Everything that logical wake-ups need from the server, in one row, so
-- that a relay that cannot listen says exactly why: the wal_level; the
-- role, and whether it may replicate (superuser or REPLICATION; on some
-- managed services a membership grants it instead, so the connection
-- attempt decides); replication slots and WAL senders in use against
-- their limits; where the outbox and inbox tables are (their schema and
-- name, as the Relation messages of the replication stream name them;
-- NULL when missing); and whether the publication of migration V16 exists
-- and publishes the inserts into each table; then where the destinations
-- table is, when the publication of migration V20 publishes its changes
-- (NULL: pauses are read by polling). Every user may read all of it.
WITH o AS (
    SELECT n.nspname::text AS nsp, c.relname::text AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass({{lit t}})
), i AS (
    SELECT n.nspname::text AS nsp, c.relname::text AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass({{lit it}})
), p AS (
    SELECT pubinsert FROM pg_publication WHERE pubname = {{lit pub}}
), d AS (
    SELECT n.nspname::text AS nsp, c.relname::text AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass({{lit (qualify (q (obj "destinations")))}})
       AND EXISTS (SELECT FROM pg_publication pp JOIN pg_publication_tables pt ON pt.pubname = pp.pubname
                    WHERE pp.pubname = {{lit pausepub}} AND pp.pubinsert AND pp.pubupdate AND pp.pubdelete
                      AND pt.schemaname = n.nspname AND pt.tablename = c.relname)
)
SELECT current_setting('wal_level'),
       current_user::text,
       COALESCE((SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user), false),
       current_setting('max_replication_slots')::int,
       (SELECT count(*) FROM pg_replication_slots)::int,
       current_setting('max_wal_senders')::int,
       (SELECT count(*) FROM pg_stat_replication)::int,
       (SELECT nsp FROM o), (SELECT rel FROM o),
       (SELECT nsp FROM i), (SELECT rel FROM i),
       EXISTS (SELECT FROM p),
       COALESCE((SELECT pubinsert FROM p), false)
           AND EXISTS (SELECT FROM pg_publication_tables pt, o WHERE pt.pubname = {{lit pub}} AND pt.schemaname = o.nsp AND pt.tablename = o.rel),
       COALESCE((SELECT pubinsert FROM p), false)
           AND EXISTS (SELECT FROM pg_publication_tables pt, i WHERE pt.pubname = {{lit pub}} AND pt.schemaname = i.nsp AND pt.tablename = i.rel),
       (SELECT nsp FROM d), (SELECT rel FROM d)

-- name: WakeupSlot
-- The wake-up slot of the relays of this database (wakeshare.go): its name
-- starts with the database's prefix ($1), or, while relays of an earlier
-- version run beside this one (a slot per outbox), with this outbox's
-- ($2). While one relay takes over from another there may be two: the one
-- that keeps more WAL. How far behind the server's WAL position, in bytes,
-- its restart position is (the WAL the server keeps for it) and its
-- confirmed position (what the relay has acknowledged). No row: no relay
-- holds a slot. Every user may read it.
SELECT s.slot_name::text,
       COALESCE((w.lsn - s.restart_lsn)::bigint, 0),
       COALESCE((w.lsn - s.confirmed_flush_lsn)::bigint, 0)
  FROM pg_replication_slots AS s,
       (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END AS lsn) AS w
 WHERE s.database = current_database() AND (starts_with(s.slot_name, $1::text) OR starts_with(s.slot_name, $2::text))
 ORDER BY s.restart_lsn
 LIMIT 1
