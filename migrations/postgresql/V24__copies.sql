-- Fan-out: the copies of a row for the destinations of a fan-out route
-- whose delivery did not end well in the row's pass (dialects.Copies). A
-- copy holds what delivering it needs (the row's topic, key, payload,
-- headers, aggregate type, sequence and creation time, copied by the
-- statement that completes the row) and its own life cycle: state,
-- attempt, schedule, lease and last_error. One copy per row and
-- destination: a replayed row's new pass replaces the old copy. No
-- foreign key to the outbox, whose rows retention deletes on their own
-- schedule. copy_change is drawn from a sequence of its own by every write
-- that makes a copy pending, so that a relay learns that copies are due
-- by reading the sequence. Indexes: due pending copies in schedule order
-- (the claim's walk); the lanes, a destination's copies of one key in
-- sequence order while pending or processing (the claim's order rule, and
-- the outbox claim's look for blocked lanes by key); processing copies by
-- claim time (expired leases); state and update time (retention,
-- listings).
CREATE SEQUENCE {{q (obj "copies_change") | qualify}};
CREATE TABLE {{q (obj "copies") | qualify}} (
    id UUID NOT NULL DEFAULT gen_random_uuid(),
    row_id UUID NOT NULL,
    destination VARCHAR(255) NOT NULL,
    topic VARCHAR(255) NOT NULL,
    {{q "key"}} VARCHAR(255) NULL,
    payload JSONB NOT NULL,
    headers JSONB NOT NULL DEFAULT '{}',
    aggregate_type VARCHAR(255) NULL,
    {{q "sequence"}} BIGINT NOT NULL,
    row_created_at TIMESTAMPTZ NOT NULL,
    state VARCHAR(50) NOT NULL DEFAULT 'pending',
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 5,
    scheduled_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    created_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    claimed_at TIMESTAMPTZ NULL,
    claim_token UUID NULL,
    lease_expires_at TIMESTAMPTZ NULL,
    last_error TEXT NULL,
    copy_change BIGINT NOT NULL DEFAULT nextval({{lit (q (obj "copies_change") | qualify)}}),
    CONSTRAINT {{q (obj "copies_pkey")}} PRIMARY KEY (id),
    CONSTRAINT {{q (obj "copies_row_dest")}} UNIQUE (row_id, destination)
);
ALTER SEQUENCE {{q (obj "copies_change") | qualify}} OWNED BY {{q (obj "copies") | qualify}}.copy_change;
CREATE INDEX {{q (idx "copies_pending")}} ON {{q (obj "copies") | qualify}} (state, scheduled_at)
    WHERE state = 'pending';
CREATE INDEX {{q (idx "copies_lanes")}} ON {{q (obj "copies") | qualify}} ({{q "key"}}, destination, {{q "sequence"}})
    WHERE state IN ('pending', 'processing');
CREATE INDEX {{q (idx "copies_processing")}} ON {{q (obj "copies") | qualify}} (claimed_at)
    WHERE state = 'processing';
CREATE INDEX {{q (idx "copies_updated")}} ON {{q (obj "copies") | qualify}} (state, updated_at);
