-- Insert order. Rows of one transaction share created_at, so created_at
-- cannot order a key; the sequence can. The rows that exist are numbered in
-- created_at order (ties in physical order, which for rows never updated is
-- their insert order). Versions 7 to 10 are not used.
CREATE SEQUENCE {{seq}};
ALTER TABLE {{t}} ADD COLUMN {{c "sequence"}} BIGINT NULL;
UPDATE {{t}} AS o
   SET {{c "sequence"}} = n.rn
  FROM (SELECT ctid AS row_ctid, row_number() OVER (ORDER BY {{c "created_at"}}, ctid) AS rn FROM {{t}}) AS n
 WHERE o.ctid = n.row_ctid;
SELECT setval({{lit seq}}, COALESCE((SELECT max({{c "sequence"}}) FROM {{t}}), 0) + 1, false);
ALTER TABLE {{t}}
    ALTER COLUMN {{c "sequence"}} SET DEFAULT nextval({{lit seq}}),
    ALTER COLUMN {{c "sequence"}} SET NOT NULL;
ALTER SEQUENCE {{seq}} OWNED BY {{t}}.{{c "sequence"}};
CREATE INDEX {{q (idx "key_sequence")}} ON {{t}} ({{c "key"}}, {{c "sequence"}})
    WHERE {{c "state"}} IN ('pending', 'processing');
