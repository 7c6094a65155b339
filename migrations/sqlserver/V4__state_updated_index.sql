-- Retention deletes old delivered and dead rows by (state, updated_at).
CREATE INDEX {{q (idx "state_updated")}} ON {{t}} ({{c "state"}}, {{c "updated_at"}});
