-- The attempt history: one row per delivery attempt of an outbox row (its
-- time and duration on the relay's clock, UTC, how it ended, what the
-- destination answered), written by the batch that writes the attempt's
-- outcome to the outbox row. No foreign key to the outbox: rows and their
-- history are deleted by separate retention rules. The table is clustered
-- on an ever-growing number, so inserts append; one index serves "the
-- attempts of one row", the other the retention's deletes, oldest first.
CREATE TABLE {{q (obj "attempts") | qualify}} (
    n BIGINT IDENTITY(1,1) NOT NULL,
    row_id UNIQUEIDENTIFIER NOT NULL,
    attempted_at DATETIME2 NOT NULL,
    duration_us BIGINT NOT NULL,
    try INT NOT NULL,
    outcome NVARCHAR(20) NOT NULL,
    destination NVARCHAR(255) NULL,
    status NVARCHAR(255) NULL,
    error NVARCHAR(MAX) NULL,
    response NVARCHAR(MAX) NULL,
    CONSTRAINT {{q (obj "attempts_pkey")}} PRIMARY KEY CLUSTERED (n)
);
GO
CREATE INDEX {{q (idx "attempts_row")}} ON {{q (obj "attempts") | qualify}} (row_id, attempted_at);
GO
CREATE INDEX {{q (idx "attempts_at")}} ON {{q (obj "attempts") | qualify}} (attempted_at);
