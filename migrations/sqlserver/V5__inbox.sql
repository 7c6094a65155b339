-- The inbox: messages received from outside, stored once per (source, message_id).
CREATE SEQUENCE {{iseq}} AS BIGINT START WITH 1 INCREMENT BY 1;
GO
CREATE TABLE {{it}} (
    {{ic "id"}} UNIQUEIDENTIFIER NOT NULL CONSTRAINT {{q (iobj "df_id")}} DEFAULT NEWID(),
    {{ic "source"}} NVARCHAR(255) NOT NULL,
    {{ic "message_id"}} NVARCHAR(255) NOT NULL,
    {{ic "topic"}} NVARCHAR(255) NOT NULL,
    {{ic "aggregate_type"}} NVARCHAR(255) NULL,
    {{ic "aggregate_id"}} NVARCHAR(255) NULL,
    {{ic "payload"}} NVARCHAR(MAX) NOT NULL,
    {{ic "headers"}} NVARCHAR(MAX) NOT NULL CONSTRAINT {{q (iobj "df_headers")}} DEFAULT '{}',
    {{ic "state"}} NVARCHAR(50) NOT NULL CONSTRAINT {{q (iobj "df_state")}} DEFAULT 'received',
    {{ic "received_at"}} DATETIME2 NOT NULL CONSTRAINT {{q (iobj "df_received_at")}} DEFAULT GETUTCDATE(),
    {{ic "relayed_at"}} DATETIME2 NULL,
    {{ic "sequence"}} BIGINT NOT NULL CONSTRAINT {{q (iobj "df_sequence")}} DEFAULT NEXT VALUE FOR {{iseq}},
    CONSTRAINT {{q (iobj "pkey")}} PRIMARY KEY ({{ic "id"}})
);
