-- The outbox table, every column of the seed page but sequence (V11).
CREATE TABLE {{t}} (
    {{c "id"}} UNIQUEIDENTIFIER NOT NULL CONSTRAINT {{q (obj "df_id")}} DEFAULT NEWID(),
    {{c "topic"}} NVARCHAR(255) NOT NULL,
    {{c "key"}} NVARCHAR(255) NULL,
    {{c "payload"}} NVARCHAR(MAX) NOT NULL,
    {{c "headers"}} NVARCHAR(MAX) NOT NULL CONSTRAINT {{q (obj "df_headers")}} DEFAULT '{}',
    {{c "aggregate_type"}} NVARCHAR(255) NULL,
    {{c "state"}} NVARCHAR(50) NOT NULL CONSTRAINT {{q (obj "df_state")}} DEFAULT 'pending',
    {{c "attempt"}} INT NOT NULL CONSTRAINT {{q (obj "df_attempt")}} DEFAULT 0,
    {{c "max_attempts"}} INT NOT NULL CONSTRAINT {{q (obj "df_max_attempts")}} DEFAULT 5,
    {{c "scheduled_at"}} DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_scheduled_at")}} DEFAULT GETUTCDATE(),
    {{c "created_at"}} DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_created_at")}} DEFAULT GETUTCDATE(),
    {{c "updated_at"}} DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_updated_at")}} DEFAULT GETUTCDATE(),
    {{c "claimed_at"}} DATETIME2 NULL,
    {{c "claim_token"}} UNIQUEIDENTIFIER NULL,
    {{c "lease_expires_at"}} DATETIME2 NULL,
    {{c "last_error"}} NVARCHAR(MAX) NULL,
    CONSTRAINT {{q (obj "pkey")}} PRIMARY KEY ({{c "id"}})
);
