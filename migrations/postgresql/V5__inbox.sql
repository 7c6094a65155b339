-- The inbox: messages received from outside, stored once per (source, message_id).
CREATE SEQUENCE {{iseq}};
CREATE TABLE {{it}} (
    {{ic "id"}} UUID NOT NULL DEFAULT gen_random_uuid(),
    {{ic "source"}} VARCHAR(255) NOT NULL,
    {{ic "message_id"}} VARCHAR(255) NOT NULL,
    {{ic "topic"}} VARCHAR(255) NOT NULL,
    {{ic "aggregate_type"}} VARCHAR(255) NULL,
    {{ic "aggregate_id"}} VARCHAR(255) NULL,
    {{ic "payload"}} JSONB NOT NULL,
    {{ic "headers"}} JSONB NOT NULL DEFAULT '{}',
    {{ic "state"}} VARCHAR(50) NOT NULL DEFAULT 'received',
    {{ic "received_at"}} TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    {{ic "relayed_at"}} TIMESTAMPTZ NULL,
    {{ic "sequence"}} BIGINT NOT NULL DEFAULT nextval({{lit iseq}}),
    CONSTRAINT {{q (iobj "pkey")}} PRIMARY KEY ({{ic "id"}})
);
ALTER SEQUENCE {{iseq}} OWNED BY {{it}}.{{ic "sequence"}};
