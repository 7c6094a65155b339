-- Pauses as wake-ups: a publication of every change to the destinations
-- table (migration V18), so that a relay listening with logical
-- replication hears at once that an operator paused or resumed a
-- destination, and reads the pauses only then (and rarely for safety)
-- rather than twice a second. It is a publication of its own because the
-- wake-ups publication (V16) publishes inserts only, for all its tables,
-- and the relay's own updates of outbox rows must stay out of the stream.
-- The destinations table holds a row per destination ever paused, and
-- changes only when an operator acts: decoding it costs nothing to speak
-- of.
--
-- As for V16: a migrating role that may not create publications gets a
-- warning, and the relay then reads the pauses twice a second; a leftover
-- publication of the same name that publishes nothing is replaced.
DO $pauses$
BEGIN
    IF EXISTS (SELECT FROM pg_publication p WHERE p.pubname = {{lit pausepub}} AND NOT p.puballtables
                  AND NOT EXISTS (SELECT FROM pg_publication_tables pt WHERE pt.pubname = p.pubname)) THEN
        DROP PUBLICATION {{q pausepub}};
    END IF;
    CREATE PUBLICATION {{q pausepub}} FOR TABLE {{q (obj "destinations") | qualify}} WITH (publish = 'insert, update, delete');
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE WARNING 'QueueBox could not create the publication % for pauses: %', {{lit (q pausepub)}}, SQLERRM
            USING HINT = 'Relays read the pauses twice a second instead. Create it as a role with CREATE on the database that owns the tables (docs/operations.md, "Wake-ups").';
    WHEN duplicate_object THEN
        RAISE WARNING 'the publication % exists already and publishes tables; QueueBox leaves it as it is', {{lit (q pausepub)}};
END
$pauses$;
