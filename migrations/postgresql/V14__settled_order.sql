-- Producer side, redone so that the application's transaction pays next to
-- nothing. V12's key locks made two transactions that write the same keys in
-- opposite orders deadlock, and V13's pg_notify serialised every commit; both
-- go. Ordering between concurrent producers is now decided by the relay
-- (the dialects package doc, "settled rows"): a keyed row is claimed only
-- once every transaction that could still commit an earlier row of its key
-- has ended. That rule needs one thing from the producer: a transaction must
-- have its transaction id before it draws a sequence value, and a column
-- default is evaluated before the row's insert assigns the id. This
-- statement trigger assigns it first. Its WHEN condition does the work and
-- is never true, so the trigger function itself never runs: the cost is one
-- function call per INSERT statement, not per row.
DROP TRIGGER {{q (obj "notify")}} ON {{t}};
DROP FUNCTION {{q (obj "notify") | qualify}}();
DROP TRIGGER {{q (obj "order_key")}} ON {{t}};
DROP FUNCTION {{q (obj "order_key") | qualify}}();
DROP TABLE {{q (obj "key_locks") | qualify}};
CREATE FUNCTION {{q (obj "xid_first") | qualify}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN NULL;
END
$fn$;
CREATE TRIGGER {{q (obj "xid_first")}} BEFORE INSERT ON {{t}}
    FOR EACH STATEMENT WHEN (pg_current_xact_id() IS NULL)
    EXECUTE FUNCTION {{q (obj "xid_first") | qualify}}();
