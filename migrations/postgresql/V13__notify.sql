-- Wake-ups: one notification per inserting statement, delivered at commit.
-- The payload names the table, so several outbox tables can share a database.
CREATE FUNCTION {{q (obj "notify") | qualify}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('queuebox', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
    RETURN NULL;
END
$fn$;
CREATE TRIGGER {{q (obj "notify")}} AFTER INSERT ON {{t}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{q (obj "notify") | qualify}}();
