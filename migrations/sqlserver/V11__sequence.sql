-- Insert order. Rows of one transaction share created_at, so created_at
-- cannot order a key; the sequence can. The rows that exist are numbered in
-- created_at order (ties broken by id). Versions 7 to 10 are not used.
CREATE SEQUENCE {{seq}} AS BIGINT START WITH 1 INCREMENT BY 1;
GO
ALTER TABLE {{t}} ADD {{c "sequence"}} BIGINT NULL;
GO
UPDATE o SET {{c "sequence"}} = n.rn
  FROM {{t}} AS o
  JOIN (SELECT {{c "id"}} AS row_id, ROW_NUMBER() OVER (ORDER BY {{c "created_at"}}, {{c "id"}}) AS rn FROM {{t}}) AS n
    ON o.{{c "id"}} = n.row_id;
GO
DECLARE @next BIGINT = (SELECT COALESCE(MAX({{c "sequence"}}), 0) + 1 FROM {{t}});
DECLARE @sql NVARCHAR(400) = N'ALTER SEQUENCE {{seq}} RESTART WITH ' + CAST(@next AS NVARCHAR(30));
EXEC sp_executesql @sql;
GO
ALTER TABLE {{t}} ALTER COLUMN {{c "sequence"}} BIGINT NOT NULL;
GO
ALTER TABLE {{t}} ADD CONSTRAINT {{q (obj "df_sequence")}} DEFAULT NEXT VALUE FOR {{seq}} FOR {{c "sequence"}};
GO
CREATE INDEX {{q (idx "key_sequence")}} ON {{t}} ({{c "key"}}, {{c "sequence"}})
    WHERE {{c "state"}} IN ('pending', 'processing');
