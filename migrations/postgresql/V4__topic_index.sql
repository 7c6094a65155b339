-- Operator queries (status, replay by topic) group and filter by topic.
CREATE INDEX {{q (idx "topic")}} ON {{t}} ({{c "topic"}});
