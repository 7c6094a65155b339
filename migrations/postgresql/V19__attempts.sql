-- The attempt history: one row per delivery attempt of an outbox row (its
-- time and duration on the relay's clock, how it ended, what the
-- destination answered), written by the statement that writes the
-- attempt's outcome to the outbox row. No foreign key to the outbox: rows
-- and their history are deleted by separate retention rules, and a key
-- would cost every outcome a lookup. The first index serves "the attempts
-- of one row", the second the retention's deletes, oldest first.
CREATE TABLE {{q (obj "attempts") | qualify}} (
    row_id UUID NOT NULL,
    attempted_at TIMESTAMPTZ NOT NULL,
    duration_us BIGINT NOT NULL,
    try INTEGER NOT NULL,
    outcome VARCHAR(20) NOT NULL,
    destination VARCHAR(255) NULL,
    status VARCHAR(255) NULL,
    error TEXT NULL,
    response TEXT NULL
);
CREATE INDEX {{q (idx "attempts_row")}} ON {{q (obj "attempts") | qualify}} (row_id, attempted_at);
CREATE INDEX {{q (idx "attempts_at")}} ON {{q (obj "attempts") | qualify}} (attempted_at);
