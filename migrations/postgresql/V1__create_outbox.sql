-- The outbox table, every column of the seed page but sequence (V11).
CREATE TABLE {{t}} (
    {{c "id"}} UUID NOT NULL DEFAULT gen_random_uuid(),
    {{c "topic"}} VARCHAR(255) NOT NULL,
    {{c "key"}} VARCHAR(255) NULL,
    {{c "payload"}} JSONB NOT NULL,
    {{c "headers"}} JSONB NOT NULL DEFAULT '{}',
    {{c "aggregate_type"}} VARCHAR(255) NULL,
    {{c "state"}} VARCHAR(50) NOT NULL DEFAULT 'pending',
    {{c "attempt"}} INTEGER NOT NULL DEFAULT 0,
    {{c "max_attempts"}} INTEGER NOT NULL DEFAULT 5,
    {{c "scheduled_at"}} TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    {{c "created_at"}} TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    {{c "updated_at"}} TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    {{c "claimed_at"}} TIMESTAMP WITH TIME ZONE NULL,
    {{c "claim_token"}} UUID NULL,
    {{c "lease_expires_at"}} TIMESTAMPTZ NULL,
    {{c "last_error"}} TEXT NULL,
    CONSTRAINT {{q (obj "pkey")}} PRIMARY KEY ({{c "id"}})
);
