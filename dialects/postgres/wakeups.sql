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
