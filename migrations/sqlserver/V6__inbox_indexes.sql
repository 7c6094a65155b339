-- Receiving is idempotent per (source, message_id); the relay reads received
-- rows in sequence order.
CREATE UNIQUE INDEX {{q (iidx "source_message")}} ON {{it}} ({{ic "source"}}, {{ic "message_id"}});
GO
CREATE INDEX {{q (iidx "received_sequence")}} ON {{it}} ({{ic "sequence"}})
    WHERE {{ic "state"}} = 'received';
