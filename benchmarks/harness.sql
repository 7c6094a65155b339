-- The benchmark's own statements, rendered for each scenario's schema. They
-- make and measure the benchmark's tables; QueueBox's statements are the
-- dialects'.

-- name: Seed
-- $1 rows, $2 keys (0: unkeyed), $3 the number of rows seeded before (so
-- that chunks keep spreading rows over the keys in turn), $4 the payload.
-- Inserted as an application inserts: the sequence default and what the
-- migrations installed run.
INSERT INTO {{t}} ({{c "topic"}}, {{c "key"}}, {{c "payload"}})
SELECT 'bench.row', CASE WHEN $2::int > 0 THEN 'key-' || ((g + $3::int) % $2::int) END, $4::jsonb
  FROM generate_series(1, $1::int) AS g

-- name: SeedTopics
-- Seed's rows with three topics that take turns within each key (a key's
-- rows are created, paid, shipped, created, ...), so that a destination
-- whose address follows the topic sees it change from one row of a key to
-- the next: the broker scenarios. The same arguments as Seed.
INSERT INTO {{t}} ({{c "topic"}}, {{c "key"}}, {{c "payload"}})
SELECT (ARRAY['bench.created', 'bench.paid', 'bench.shipped'])[1 + ((g + $3::int) / $2::int) % 3],
       'key-' || ((g + $3::int) % $2::int), $4::jsonb
  FROM generate_series(1, $1::int) AS g

-- name: Analyze
ANALYZE {{t}}

-- name: CountOpen
SELECT count(*) FROM {{t}} WHERE {{c "state"}} IN ('pending', 'processing')

-- name: AnyOpen
-- Whether any row is not yet delivered or dead: one probe of the partial
-- index, cheap enough to poll while replicas drain (a count every 50 ms
-- cost the database a noticeable share of the run).
SELECT EXISTS (SELECT 1 FROM {{t}} WHERE {{c "state"}} IN ('pending', 'processing'))

-- name: DropSchema
DROP SCHEMA IF EXISTS {{q schema}} CASCADE

-- name: PlainTable
-- The producer scenario's table without what QueueBox installs in the
-- application's transaction.
ALTER TABLE {{t}} DISABLE TRIGGER USER
