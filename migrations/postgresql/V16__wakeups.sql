-- Wake-ups from logical replication: a publication of the inserts into the
-- outbox and inbox tables, which each relay's listener subscribes to with a
-- temporary slot (pgoutput). Nothing changes for the application: a
-- publication is a catalog entry, read only by a walsender that decodes WAL
-- for a slot; without one (wal_level below logical, or no relay listening)
-- it costs nothing.
--
-- Inserts only (publish = 'insert'): the relay's own updates and deletes
-- are no news. On PostgreSQL 15 and later a column list keeps each insert's
-- message to the id: the server then never turns a payload into text for a
-- nudge that does not read it. Older servers publish whole rows.
--
-- CREATE PUBLICATION needs the CREATE privilege on the database and
-- ownership of the tables. A migrating role without it gets a warning, not
-- a failed migration: wake-ups are optional, and the relay then probes and
-- says that the publication is missing (docs/operations.md, "Wake-ups", has
-- the statement to run as a role that may).
--
-- Publications belong to the database, not to a schema, so the name
-- carries the schema (Names.Publication). One that exists and publishes
-- nothing was left by tables of the same names that were dropped: it is
-- replaced. One that publishes tables is left as it is, with a warning.
DO $wakeups$
DECLARE
    tables text := '{{t}}, {{it}}';
BEGIN
    IF current_setting('server_version_num')::int >= 150000 THEN
        tables := '{{t}} ({{c "id"}}), {{it}} ({{ic "id"}})';
    END IF;
    IF EXISTS (SELECT FROM pg_publication p WHERE p.pubname = {{lit pub}} AND NOT p.puballtables
                  AND NOT EXISTS (SELECT FROM pg_publication_tables pt WHERE pt.pubname = p.pubname)) THEN
        DROP PUBLICATION {{q pub}};
    END IF;
    EXECUTE 'CREATE PUBLICATION {{q pub}} FOR TABLE ' || tables || ' WITH (publish = ''insert'')';
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE WARNING 'QueueBox could not create the publication % for its wake-ups: %', {{lit (q pub)}}, SQLERRM
            USING HINT = 'The relay probes instead. Create it as a role with CREATE on the database that owns the tables (docs/operations.md, "Wake-ups").';
    WHEN duplicate_object THEN
        RAISE WARNING 'the publication % exists already and publishes tables; QueueBox leaves it as it is (the relay listens only if it publishes the inserts into its tables)', {{lit (q pub)}};
END
$wakeups$;
