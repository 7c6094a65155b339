-- The inbox relay keeps receive order per aggregate_id into the outbox with
-- the rule the outbox claim uses (the dialects package doc, "settled
-- rows"): a keyed inbox row is relayed only once every transaction that
-- could still commit an earlier inbox row has ended. Sources insert inbox
-- rows in transactions of their own, which can commit out of sequence
-- order exactly as producers' outbox rows can. The rule needs a
-- transaction to have its id before it draws an inbox sequence value; a
-- column default is evaluated before the row's insert assigns the id, so
-- this statement trigger assigns it first, as V14's does for the outbox.
-- Its WHEN condition does the work and is never true: the function never
-- runs.
CREATE FUNCTION {{q (iobj "xid_first") | qualify}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN NULL;
END
$fn$;
CREATE TRIGGER {{q (iobj "xid_first")}} BEFORE INSERT ON {{it}}
    FOR EACH STATEMENT WHEN (pg_current_xact_id() IS NULL)
    EXECUTE FUNCTION {{q (iobj "xid_first") | qualify}}();
