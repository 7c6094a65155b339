-- Fan-out: the copies of a row for the destinations of a fan-out route
-- whose delivery did not end well in the row's pass (dialects.Copies). A
-- copy holds what delivering it needs (the row's topic, key, payload,
-- headers, aggregate type, sequence and creation time, copied by the batch
-- that completes the row) and its own life cycle: state, attempt,
-- schedule, lease and last_error. One copy per row and destination: a
-- replayed row's new pass replaces the old copy. No foreign key to the
-- outbox, whose rows retention deletes on their own schedule. copy_change
-- is drawn from a sequence of its own by every write that makes a copy
-- pending, so that a relay learns that copies are due by reading the
-- sequence. Indexes: due pending copies in schedule order (the claim's
-- walk); the lanes, a destination's copies of one key in sequence order
-- while pending or processing (the claim's order rule, and the outbox
-- claim's look for blocked lanes by key); processing copies by claim time
-- (expired leases); state and update time (retention, listings).
CREATE SEQUENCE {{q (obj "copies_change") | qualify}} AS BIGINT START WITH 1 INCREMENT BY 1;
GO
CREATE TABLE {{q (obj "copies") | qualify}} (
    id UNIQUEIDENTIFIER NOT NULL CONSTRAINT {{q (obj "df_copies_id")}} DEFAULT NEWID(),
    row_id UNIQUEIDENTIFIER NOT NULL,
    destination NVARCHAR(255) NOT NULL,
    topic NVARCHAR(255) NOT NULL,
    [key] NVARCHAR(255) NULL,
    payload NVARCHAR(MAX) NOT NULL,
    headers NVARCHAR(MAX) NOT NULL CONSTRAINT {{q (obj "df_copies_headers")}} DEFAULT '{}',
    aggregate_type NVARCHAR(255) NULL,
    [sequence] BIGINT NOT NULL,
    row_created_at DATETIME2 NOT NULL,
    state NVARCHAR(50) NOT NULL CONSTRAINT {{q (obj "df_copies_state")}} DEFAULT 'pending',
    attempt INT NOT NULL CONSTRAINT {{q (obj "df_copies_attempt")}} DEFAULT 0,
    max_attempts INT NOT NULL CONSTRAINT {{q (obj "df_copies_max")}} DEFAULT 5,
    scheduled_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_copies_scheduled")}} DEFAULT GETUTCDATE(),
    created_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_copies_created")}} DEFAULT GETUTCDATE(),
    updated_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_copies_updated")}} DEFAULT GETUTCDATE(),
    claimed_at DATETIME2 NULL,
    claim_token UNIQUEIDENTIFIER NULL,
    lease_expires_at DATETIME2 NULL,
    last_error NVARCHAR(MAX) NULL,
    copy_change BIGINT NOT NULL CONSTRAINT {{q (obj "df_copies_change")}} DEFAULT NEXT VALUE FOR {{q (obj "copies_change") | qualify}},
    CONSTRAINT {{q (obj "copies_pkey")}} PRIMARY KEY (id),
    CONSTRAINT {{q (obj "copies_row_dest")}} UNIQUE (row_id, destination)
);
GO
CREATE INDEX {{q (idx "copies_pending")}} ON {{q (obj "copies") | qualify}} (state, scheduled_at)
    WHERE state = 'pending';
GO
CREATE INDEX {{q (idx "copies_lanes")}} ON {{q (obj "copies") | qualify}} ([key], destination, [sequence])
    WHERE state IN ('pending', 'processing');
GO
CREATE INDEX {{q (idx "copies_processing")}} ON {{q (obj "copies") | qualify}} (claimed_at)
    WHERE state = 'processing';
GO
CREATE INDEX {{q (idx "copies_updated")}} ON {{q (obj "copies") | qualify}} (state, updated_at);
