-- The rewind counter (V17) becomes a row of a table. A sequence moves when a
-- replay draws it, not when the replay commits: a read of the floors whose
-- snapshot was taken in between saw the counter moved but not the replayed
-- rows, and labelled floors that were too high with the new value. A row
-- moves with the commit of the transaction that moved it, and the claims,
-- the probe and the read of the floors read it in their own snapshots: the
-- floors' label and the rows they were made from are always of one moment.
-- Rewinds are rare (a replay, expired leases, a stopping replica), so the
-- row keeps few versions even while a long transaction holds vacuum back.
CREATE TABLE {{q (obj "rewinds_new") | qualify}} (
    one boolean NOT NULL DEFAULT true CHECK (one),
    counter bigint NOT NULL,
    CONSTRAINT {{q (obj "rewinds_pkey")}} PRIMARY KEY (one)
);
INSERT INTO {{q (obj "rewinds_new") | qualify}} (counter)
SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {{q (obj "rewinds") | qualify}};
DROP SEQUENCE {{q (obj "rewinds") | qualify}};
ALTER TABLE {{q (obj "rewinds_new") | qualify}} RENAME TO {{q (obj "rewinds")}};
