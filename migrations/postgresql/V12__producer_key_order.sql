-- Producer-side ordering. Two transactions inserting rows of one key at once
-- could commit in the opposite order of their sequence values, and the relay
-- would then deliver the later event first. Before a keyed row draws its
-- sequence value, this trigger takes a row lock on the key in a small lock
-- table; the lock lasts until the transaction ends, so within a key the
-- sequence order equals the commit order. Row locks, unlike advisory locks,
-- live in the rows themselves, so one transaction may insert any number of
-- distinct keys. The column default has already drawn a value when a BEFORE
-- trigger runs; the trigger draws a new one after the lock (the sequence gets
-- gaps, which nothing depends on).
CREATE TABLE {{q (obj "key_locks") | qualify}} (
    {{q "key"}} VARCHAR(255) NOT NULL,
    CONSTRAINT {{q (obj "key_locks_pkey")}} PRIMARY KEY ({{q "key"}})
);
CREATE FUNCTION {{q (obj "order_key") | qualify}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.{{c "key"}} IS NOT NULL AND NEW.{{c "key"}} <> '' THEN
        LOOP
            PERFORM 1 FROM {{q (obj "key_locks") | qualify}} WHERE {{q "key"}} = NEW.{{c "key"}} FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {{q (obj "key_locks") | qualify}} ({{q "key"}}) VALUES (NEW.{{c "key"}}) ON CONFLICT DO NOTHING;
        END LOOP;
        NEW.{{c "sequence"}} := nextval({{lit seq}});
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER {{q (obj "order_key")}} BEFORE INSERT ON {{t}}
    FOR EACH ROW EXECUTE FUNCTION {{q (obj "order_key") | qualify}}();
