-- Every statement QueueBox runs against SQL Server, rendered once for the
-- configured table and column names. Ids travel as text (CAST to and from
-- UNIQUEIDENTIFIER) so that no driver byte-order question arises; lists of
-- values travel as one JSON parameter read with OPENJSON. Times are UTC
-- (DATETIME2 holds no zone; the column defaults use GETUTCDATE()). A
-- statement with many parameters names them (@limit), and the driver binds
-- them by name from a Go struct whose fields carry the same names (see
-- dialects.Named); the others number theirs (@p1). Such a statement's own
-- variables (DECLARE @now) never share a name with a parameter.

-- fragment: KeyedHead
-- The keyed row o (outside @keys) is a head the claim may take: settled
-- (at or below @settled, when there is a gate) and the first pending or
-- processing row of its key.
o.{{c "key"}} NOT IN (SELECT k FROM @keys)
            AND (@settled IS NULL OR o.{{c "sequence"}} <= @settled) AND NOT EXISTS (
            SELECT 1 FROM {{t}} AS b
             WHERE b.{{c "key"}} = o.{{c "key"}}
               AND b.{{c "sequence"}} < o.{{c "sequence"}}
               AND b.{{c "state"}} IN (N'pending', N'processing'))

-- name: OutboxClaim
-- @limit the most rows, @lease_ms the lease, @token the claim token,
-- @max_heads the most heads (<= @limit), @settled the settled watermark
-- (NULL: no gate), @continue_keys a JSON array of the keys to continue, in
-- order, @walk how the claim finds heads beyond them (0 in schedule order,
-- 1 key by key after @after, 2 not at all: dialects.ClaimWalk). Heads, then
-- each keyed head's followers, as in the PostgreSQL dialect (see the
-- dialects package doc); keyed rows beyond the watermark are neither heads
-- nor followers. The claim ignores the relay's bounds (see the package
-- doc): a continued key's head is its first pending or processing row.
-- @keys: the keys to continue, each once, in the order first given.
-- continued heads: each key's first pending or processing row, found
-- without a lock (a row that another claim holds is still seen, so the row
-- behind it is never taken for the head), then locked, and taken when it
-- is pending, due and settled.
-- walked heads: due pending rows, locked, that are heads and not of a
-- continued key: in schedule order (@walk 0); or key by key (@walk 1), the
-- keys after @after first, then, wrapping around, the keys up to it, then
-- the rows without a key; none with @walk 2. The greatest key the walk by
-- key took is where the next one goes on (@cursor, returned with the rows).
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @keys TABLE (k NVARCHAR(255) PRIMARY KEY, n INT NOT NULL);
INSERT INTO @keys (k, n)
SELECT CAST(j.[value] AS NVARCHAR(255)), MIN(CAST(j.[key] AS INT))
  FROM OPENJSON(@continue_keys) AS j
 GROUP BY CAST(j.[value] AS NVARCHAR(255));
DECLARE @heads TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, k NVARCHAR(255) NULL, seq BIGINT NOT NULL, walked BIT NOT NULL);
INSERT INTO @heads (id, k, seq, walked)
SELECT TOP (@max_heads) x.{{c "id"}}, x.{{c "key"}}, x.{{c "sequence"}}, 0
  FROM @keys AS c
 CROSS APPLY (SELECT TOP (1) h.{{c "id"}} AS id
                FROM {{t}} AS h
               WHERE h.{{c "key"}} = c.k AND h.{{c "state"}} IN (N'pending', N'processing')
               ORDER BY h.{{c "sequence"}}) AS f
  JOIN {{t}} AS x WITH (UPDLOCK, READPAST, ROWLOCK) ON x.{{c "id"}} = f.id
 WHERE x.{{c "state"}} = N'pending'
   AND x.{{c "scheduled_at"}} <= @now
   AND (@settled IS NULL OR x.{{c "sequence"}} <= @settled)
 ORDER BY c.n;
DECLARE @room INT = @max_heads - (SELECT COUNT(*) FROM @heads);
IF @walk = 0
    INSERT INTO @heads (id, k, seq, walked)
    SELECT TOP (@room) o.{{c "id"}}, o.{{c "key"}}, o.{{c "sequence"}}, 0
      FROM {{t}} AS o WITH (UPDLOCK, READPAST, ROWLOCK)
     WHERE o.{{c "state"}} = N'pending'
       AND o.{{c "scheduled_at"}} <= @now
       AND (o.{{c "key"}} IS NULL OR o.{{c "key"}} = N'' OR ({{template "KeyedHead"}}))
     ORDER BY o.{{c "scheduled_at"}};
IF @walk = 1
BEGIN
    INSERT INTO @heads (id, k, seq, walked)
    SELECT TOP (@room) o.{{c "id"}}, o.{{c "key"}}, o.{{c "sequence"}}, 1
      FROM {{t}} AS o WITH (UPDLOCK, READPAST, ROWLOCK)
     WHERE o.{{c "state"}} = N'pending'
       AND o.{{c "scheduled_at"}} <= @now
       AND o.{{c "key"}} > @after
       AND {{template "KeyedHead"}}
     ORDER BY o.{{c "key"}}, o.{{c "sequence"}};
    SET @room = @max_heads - (SELECT COUNT(*) FROM @heads);
    INSERT INTO @heads (id, k, seq, walked)
    SELECT TOP (@room) o.{{c "id"}}, o.{{c "key"}}, o.{{c "sequence"}}, 1
      FROM {{t}} AS o WITH (UPDLOCK, READPAST, ROWLOCK)
     WHERE o.{{c "state"}} = N'pending'
       AND o.{{c "scheduled_at"}} <= @now
       AND o.{{c "key"}} > N'' AND o.{{c "key"}} <= @after
       AND {{template "KeyedHead"}}
     ORDER BY o.{{c "key"}}, o.{{c "sequence"}};
    SET @room = @max_heads - (SELECT COUNT(*) FROM @heads);
    INSERT INTO @heads (id, k, seq, walked)
    SELECT TOP (@room) o.{{c "id"}}, o.{{c "key"}}, o.{{c "sequence"}}, 0
      FROM {{t}} AS o WITH (UPDLOCK, READPAST, ROWLOCK)
     WHERE o.{{c "state"}} = N'pending'
       AND o.{{c "scheduled_at"}} <= @now
       AND (o.{{c "key"}} IS NULL OR o.{{c "key"}} = N'')
     ORDER BY o.{{c "sequence"}};
END;
DECLARE @cursor NVARCHAR(255) = (SELECT MAX(k) FROM @heads WHERE walked = 1);
DECLARE @nheads INT = (SELECT COUNT(*) FROM @heads);
DECLARE @per INT = (@limit - @nheads) / CASE WHEN @nheads > 0 THEN @nheads ELSE 1 END;
DECLARE @claim TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
INSERT INTO @claim (id) SELECT id FROM @heads;
INSERT INTO @claim (id)
SELECT f.id
  FROM @heads AS h
 CROSS APPLY (
       SELECT w.id
         FROM (SELECT TOP (@per) x.{{c "id"}} AS id,
                      MAX(CASE WHEN x.{{c "state"}} = N'processing' OR x.{{c "scheduled_at"}} > @now THEN 1 ELSE 0 END)
                          OVER (ORDER BY x.{{c "sequence"}} ROWS UNBOUNDED PRECEDING) AS blocked
                 FROM {{t}} AS x
                WHERE x.{{c "key"}} = h.k
                  AND x.{{c "sequence"}} > h.seq
                  AND x.{{c "state"}} IN (N'pending', N'processing')
                  AND (@settled IS NULL OR x.{{c "sequence"}} <= @settled)
                ORDER BY x.{{c "sequence"}}) AS w
        WHERE w.blocked = 0) AS f
 WHERE h.k IS NOT NULL AND h.k <> N'';
UPDATE o
   SET {{c "state"}} = N'processing',
       {{c "claimed_at"}} = @now,
       {{c "claim_token"}} = CAST(@token AS UNIQUEIDENTIFIER),
       {{c "lease_expires_at"}} = DATEADD(millisecond, @lease_ms, @now),
       {{c "updated_at"}} = @now
OUTPUT CAST(inserted.{{c "id"}} AS NVARCHAR(36)), inserted.{{c "topic"}}, COALESCE(inserted.{{c "key"}}, N''),
       inserted.{{c "payload"}}, inserted.{{c "headers"}}, inserted.{{c "aggregate_type"}}, inserted.{{c "attempt"}},
       inserted.{{c "max_attempts"}}, inserted.{{c "sequence"}}, inserted.{{c "created_at"}}, @cursor
  FROM {{t}} AS o
  JOIN @claim AS c ON o.{{c "id"}} = c.id
 WHERE o.{{c "state"}} = N'pending';
COMMIT TRANSACTION;

-- name: OutboxRenewLeases
-- @p1 JSON array of {i: id, t: token} of the held rows, @p2 lease in ms.
-- The rows are found by id, in the primary key, as completions find them:
-- a seek of the processing index by token would pass over the ghost
-- records of every row claimed and completed since. Rows that a completion
-- holds right now are skipped (READPAST): they are being released anyway.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
UPDATE o
   SET {{c "lease_expires_at"}} = DATEADD(millisecond, @p2, @now)
OUTPUT CAST(inserted.{{c "id"}} AS NVARCHAR(36))
  FROM {{t}} AS o WITH (ROWLOCK, READPAST)
  JOIN OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', t UNIQUEIDENTIFIER '$.t') AS v
    ON o.{{c "id"}} = v.i AND o.{{c "claim_token"}} = v.t
 WHERE o.{{c "state"}} = N'processing';

-- fragment: CompleteUpdate
-- The update of OutboxComplete and OutboxCompleteAttempts; the dot is its
-- OUTPUT clause.
UPDATE o
   SET {{c "state"}} = v.s,
       {{c "attempt"}} = o.{{c "attempt"}} + v.a,
       {{c "scheduled_at"}} = COALESCE(DATEADD(millisecond, v.d, @now), o.{{c "scheduled_at"}}),
       {{c "last_error"}} = CASE WHEN v.w = 1 THEN v.e ELSE o.{{c "last_error"}} END,
       {{c "claimed_at"}} = NULL,
       {{c "claim_token"}} = NULL,
       {{c "lease_expires_at"}} = NULL,
       {{c "updated_at"}} = @now
OUTPUT {{.}}
  FROM {{t}} AS o
  JOIN OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', t UNIQUEIDENTIFIER '$.t', s NVARCHAR(50) '$.s',
                           a INT '$.a', d INT '$.d', w INT '$.w', e NVARCHAR(MAX) '$.e') AS v
    ON o.{{c "id"}} = v.i AND o.{{c "claim_token"}} = v.t
 WHERE o.{{c "state"}} = N'processing';

-- name: OutboxComplete
-- @p1 JSON array of {i: id, t: token, s: state, a: attempt increment,
-- d: delay ms or null, w: 1 to write e into last_error, e: error}.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
{{template "CompleteUpdate" (printf "CAST(inserted.%s AS NVARCHAR(36))" (c "id"))}}

-- name: OutboxCompleteAttempts
-- OutboxComplete, and the attempt history in the same batch: the elements
-- of @p1 that carry an attempt have at (when it started, UTC, ISO 8601
-- without a zone), us (duration in microseconds), n (try), k (outcome), and
-- ds, st, er, rs (destination, status, error, response excerpt; "" for
-- none); p is 1 for a circuit's probe and u 1 for a failure not counted,
-- absent otherwise. An attempt is recorded only when its outcome was
-- written.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @done TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
{{template "CompleteUpdate" (printf "inserted.%s INTO @done" (c "id"))}}
INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
SELECT v.i, CONVERT(DATETIME2, v.at, 126), v.us, v.n, v.k, NULLIF(v.ds, N''), NULLIF(v.st, N''), NULLIF(v.er, N''), NULLIF(v.rs, N''),
       COALESCE(v.p, 0), 1 - COALESCE(v.u, 0)
  FROM OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', at NVARCHAR(40) '$.at', us BIGINT '$.us', n INT '$.n', k NVARCHAR(20) '$.k',
                           ds NVARCHAR(255) '$.ds', st NVARCHAR(255) '$.st', er NVARCHAR(MAX) '$.er', rs NVARCHAR(MAX) '$.rs',
                           p INT '$.p', u INT '$.u') AS v
 WHERE v.at IS NOT NULL
   AND v.i IN (SELECT id FROM @done);
SELECT CAST(id AS NVARCHAR(36)) FROM @done;

-- name: OutboxReleaseExpired
-- @p1 limit, @p2 JSON array of claim tokens the caller still holds.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
UPDATE TOP (@p1) o
   SET {{c "state"}} = N'pending',
       {{c "claimed_at"}} = NULL,
       {{c "claim_token"}} = NULL,
       {{c "lease_expires_at"}} = NULL,
       {{c "updated_at"}} = @now
  FROM {{t}} AS o WITH (ROWLOCK, READPAST)
 WHERE o.{{c "state"}} = N'processing'
   AND (o.{{c "lease_expires_at"}} IS NULL OR o.{{c "lease_expires_at"}} <= @now)
   AND (o.{{c "claim_token"}} IS NULL
        OR o.{{c "claim_token"}} NOT IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p2)));
SELECT @@ROWCOUNT;

-- fragment: Filter
-- The operator filter: @states (JSON), @ids (JSON; NULL: any), @key
-- (NULL: any), @since and @until (updated_at), @error_text (text in
-- last_error).
{{c "state"}} IN (SELECT [value] FROM OPENJSON(@states))
   AND (@ids IS NULL OR {{c "id"}} IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@ids)))
   AND (@key IS NULL OR {{c "key"}} = @key)
   AND (@since IS NULL OR {{c "updated_at"}} >= @since)
   AND (@until IS NULL OR {{c "updated_at"}} < @until)
   AND (@error_text IS NULL OR CHARINDEX(LOWER(@error_text), LOWER({{c "last_error"}})) > 0)

-- name: OutboxSelect
-- The filter (see Filter), the rows after @after_sequence, at most @limit.
SELECT TOP (@limit) CAST({{c "id"}} AS NVARCHAR(36)), {{c "topic"}}, {{c "sequence"}}
  FROM {{t}}
 WHERE {{template "Filter"}}
   AND {{c "sequence"}} > @after_sequence
 ORDER BY {{c "sequence"}};

-- name: OutboxList
-- Like OutboxSelect, newest update first, with the columns operators read:
-- continues after the row (@after_updated_at, @after_sequence) when set
-- (keyset), at most @limit.
SELECT TOP (@limit) CAST({{c "id"}} AS NVARCHAR(36)), {{c "topic"}}, {{c "key"}}, {{c "aggregate_type"}}, {{c "state"}},
       {{c "attempt"}}, {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}, {{c "updated_at"}}, {{c "last_error"}}
  FROM {{t}}
 WHERE {{template "Filter"}}
   AND (@after_updated_at IS NULL OR {{c "updated_at"}} < @after_updated_at
        OR ({{c "updated_at"}} = @after_updated_at AND {{c "sequence"}} < @after_sequence))
 ORDER BY {{c "updated_at"}} DESC, {{c "sequence"}} DESC;

-- name: OutboxReplayIDs
-- @p1 JSON ids, @p2 JSON states that may be replayed. @p3: who replayed,
-- recorded in each row's history after its latest attempt (NULL: nothing),
-- so that a relay whose clock is ahead of the database's cannot place the
-- replay before the attempt that ended the row; with, for a row that was
-- delivered, its try and when its delivery was written (deleted.*, the
-- row before the update): the history records no first try that
-- succeeds, which only the row tells until the replay sets it back. The
-- row's copies (a fan-out row's) go: its new pass delivers to every
-- destination again, and copies what does not end well there.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @replayed TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, was NVARCHAR(50), was_attempt INT, was_at DATETIME2);
UPDATE {{t}}
   SET {{c "state"}} = N'pending',
       {{c "attempt"}} = 0,
       {{c "last_error"}} = NULL,
       {{c "scheduled_at"}} = @now,
       {{c "claimed_at"}} = NULL,
       {{c "claim_token"}} = NULL,
       {{c "lease_expires_at"}} = NULL,
       {{c "updated_at"}} = @now
OUTPUT inserted.{{c "id"}}, deleted.{{c "state"}}, deleted.{{c "attempt"}}, deleted.{{c "updated_at"}} INTO @replayed
 WHERE {{c "id"}} IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p1))
   AND {{c "state"}} IN (SELECT [value] FROM OPENJSON(@p2))
   AND {{c "state"}} <> N'processing';
INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, replayed_by, row_delivered_try, row_delivered_at)
SELECT r.id, CASE WHEN l.at >= @now THEN DATEADD(microsecond, 1, l.at) ELSE @now END, 0, 0, N'replayed', @p3,
       CASE WHEN r.was = N'delivered' THEN r.was_attempt + 1 END,
       CASE WHEN r.was = N'delivered' THEN r.was_at END
  FROM @replayed AS r
 OUTER APPLY (SELECT MAX(a.attempted_at) AS at FROM {{q (obj "attempts") | qualify}} AS a WHERE a.row_id = r.id) AS l
 WHERE @p3 IS NOT NULL;
DELETE FROM {{q (obj "copies") | qualify}} WHERE row_id IN (SELECT id FROM @replayed);
SELECT COUNT(*) FROM @replayed;

-- name: OutboxPurge
-- @p1 state, @p2 age in seconds, @p3 batch.
SET NOCOUNT ON;
DELETE TOP (@p3) FROM {{t}} WITH (ROWLOCK, READPAST)
 WHERE {{c "state"}} = @p1
   AND {{c "updated_at"}} < DATEADD(second, -@p2, SYSUTCDATETIME());
SELECT @@ROWCOUNT;

-- name: OutboxPurgeWait
-- @p1 state, @p2 age in seconds: how long, in ms, until the oldest row in
-- the state was last updated more than the age ago (the age when none is in
-- it). One seek of idx_outbox_state_updated.
SELECT COALESCE(DATEDIFF_BIG(millisecond, SYSUTCDATETIME(), DATEADD(second, @p2, MIN({{c "updated_at"}}))), CAST(@p2 AS BIGINT) * 1000)
  FROM {{t}}
 WHERE {{c "state"}} = @p1;

-- name: OutboxCountByState
SELECT {{c "state"}}, COUNT_BIG(*) FROM {{t}} GROUP BY {{c "state"}};

-- name: OutboxDeadByTopic
SELECT {{c "topic"}}, COUNT_BIG(*) FROM {{t}} WHERE {{c "state"}} = N'dead' GROUP BY {{c "topic"}};

-- name: OutboxPendingDue
-- How long the oldest row that the relay could claim now has waited since
-- it became due, in ms (0 when none is due), and how many pending rows are
-- scheduled later. Only a key's head (no earlier row of its key pending or
-- being delivered) and an unkeyed row can be claimed: a row behind its
-- key's head waits for that row, not for the relay, and does not count,
-- whether the head is due, held (a retry, a pause, an open circuit, a rate
-- limit, a row scheduled ahead) or being delivered. The walk reads the
-- pending_scheduled index, as the claim does, from the oldest due row, and
-- stops at the first head or unkeyed row; each row costs one seek of the
-- key_sequence index. It reads at most 10,000 due rows: when every one of
-- them waits behind its head, the figure is 0 (the heads were handled by
-- the relay just now, or they would be older than the rows behind them).
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
SELECT COALESCE(DATEDIFF_BIG(millisecond, (
           SELECT TOP (1) w.at
             FROM (SELECT TOP (10000) o.{{c "scheduled_at"}} AS at, o.{{c "key"}} AS k, o.{{c "sequence"}} AS seq
                     FROM {{t}} AS o
                    WHERE o.{{c "state"}} = N'pending' AND o.{{c "scheduled_at"}} <= @now
                    ORDER BY o.{{c "scheduled_at"}}) AS w
            WHERE COALESCE(w.k, N'') = N''
               OR NOT EXISTS (SELECT 1 FROM {{t}} AS e
                               WHERE e.{{c "key"}} = w.k AND e.{{c "sequence"}} < w.seq
                                 AND e.{{c "state"}} IN (N'pending', N'processing'))
            ORDER BY w.at), @now), 0),
       (SELECT COUNT_BIG(*) FROM {{t}} WHERE {{c "state"}} = N'pending' AND {{c "scheduled_at"}} > @now);

-- name: OutboxHorizon
-- The oldest open transaction of another session in this database: under
-- read committed snapshot or snapshot isolation it keeps the row versions
-- in tempdb's version store, and the ghost records that claims and
-- completions leave in the outbox's indexes wait for it before the ghost
-- cleanup can remove them. SQL Server does not count those cheaply, so the
-- dead versions are not read (-1). The requests that the relays' own
-- sessions (this session's program name) are running are left out: each
-- has a timeout, and a relay that took another's slow claim for a long
-- transaction would behave as under one for nothing. Needs VIEW SERVER
-- STATE.
SET NOCOUNT ON;
SELECT TOP (1) N'transaction', CAST(s.session_id AS BIGINT), t.database_transaction_begin_time, c.last_read,
       s.status, COALESCE(s.program_name, N''), COALESCE(LEFT(q.text, 200), N''), CAST(0 AS BIGINT), CAST(-1 AS BIGINT)
  FROM sys.dm_tran_database_transactions AS t
  JOIN sys.dm_tran_session_transactions AS st ON st.transaction_id = t.transaction_id
  JOIN sys.dm_exec_sessions AS s ON s.session_id = st.session_id
  LEFT JOIN sys.dm_exec_connections AS c ON c.session_id = s.session_id
 OUTER APPLY sys.dm_exec_sql_text(c.most_recent_sql_handle) AS q
 WHERE t.database_id = DB_ID() AND st.session_id <> @@SPID AND t.database_transaction_begin_time IS NOT NULL
   AND NOT (s.status = N'running' AND s.program_name = APP_NAME())
 ORDER BY t.database_transaction_begin_time;

-- name: OutboxNextDue
-- How long, in ms, until the earliest pending row scheduled later comes
-- due (NULL: none is). One seek of the pending_scheduled index.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
SELECT DATEDIFF_BIG(millisecond, @now, MIN({{c "scheduled_at"}}))
  FROM {{t}}
 WHERE {{c "state"}} = N'pending' AND {{c "scheduled_at"}} > @now;

-- name: OutboxCountByTopicState
-- One pass over the table; the admin listener samples it on an interval.
SELECT {{c "topic"}}, {{c "state"}}, COUNT_BIG(*) FROM {{t}} GROUP BY {{c "topic"}}, {{c "state"}};

-- name: OutboxBlockedKeys
-- Keys whose head (the first pending or processing row of the key) waits for
-- a retry. @p1 bounds the rows scheduled later that are examined (the
-- earliest due first), @p2 the keys returned, the longest waiting first;
-- @p3 caps the count of rows behind each head. Durations in ms.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
SELECT TOP (@p2) h.k, CAST(h.id AS NVARCHAR(36)), h.topic, h.attempt, h.max_attempts, h.last_error,
       DATEDIFF_BIG(millisecond, h.created_at, @now),
       DATEDIFF_BIG(millisecond, @now, h.scheduled_at),
       (SELECT COUNT_BIG(*) FROM (SELECT TOP (@p3) 1 AS one FROM {{t}} AS b
                                   WHERE b.{{c "key"}} = h.k AND b.{{c "sequence"}} > h.seq
                                     AND b.{{c "state"}} IN (N'pending', N'processing')) AS behind)
  FROM (SELECT TOP (@p1) o.{{c "key"}} AS k, o.{{c "id"}} AS id, o.{{c "topic"}} AS topic, o.{{c "attempt"}} AS attempt,
               o.{{c "max_attempts"}} AS max_attempts, o.{{c "last_error"}} AS last_error,
               o.{{c "created_at"}} AS created_at, o.{{c "scheduled_at"}} AS scheduled_at, o.{{c "sequence"}} AS seq
          FROM {{t}} AS o
         WHERE o.{{c "state"}} = N'pending' AND o.{{c "scheduled_at"}} > @now
         ORDER BY o.{{c "scheduled_at"}}) AS h
 WHERE h.k IS NOT NULL AND h.k <> N'' AND h.attempt > 0
   AND NOT EXISTS (SELECT 1 FROM {{t}} AS b
                    WHERE b.{{c "key"}} = h.k AND b.{{c "sequence"}} < h.seq
                      AND b.{{c "state"}} IN (N'pending', N'processing'))
 ORDER BY h.created_at, h.seq;

-- name: OutboxDeadGroups
-- The newest @p1 dead rows (by updated_at, from the state_updated index)
-- grouped by topic and the first @p2 characters of last_error, with the
-- group's newest update and ids (newest first, comma-separated). @p1 bounds
-- the work on a table with millions of dead rows; the caller normalises the
-- errors. The error start is cast out of NVARCHAR(MAX), a type an index or
-- a sort key handles slowly.
SELECT d.topic, d.err, COUNT_BIG(*), MAX(d.updated_at),
       STRING_AGG(CAST(d.id AS NVARCHAR(MAX)), N',') WITHIN GROUP (ORDER BY d.updated_at DESC, d.seq DESC)
  FROM (SELECT TOP (@p1) {{c "topic"}} AS topic, CAST(COALESCE(LEFT({{c "last_error"}}, @p2), N'') AS NVARCHAR(4000)) AS err,
               {{c "updated_at"}} AS updated_at, {{c "sequence"}} AS seq, CAST({{c "id"}} AS NVARCHAR(36)) AS id
          FROM {{t}}
         WHERE {{c "state"}} = N'dead'
         ORDER BY {{c "updated_at"}} DESC) AS d
 GROUP BY d.topic, d.err;

-- name: OutboxInsert
-- @p1 JSON array of rows {i, topic, k, payload, headers, agg, max, at}; the
-- sequence is drawn in array order.
SET NOCOUNT ON;
INSERT INTO {{t}} ({{c "id"}}, {{c "topic"}}, {{c "key"}}, {{c "payload"}}, {{c "headers"}},
                   {{c "aggregate_type"}}, {{c "max_attempts"}}, {{c "scheduled_at"}}, {{c "sequence"}})
SELECT COALESCE(v.i, NEWID()), v.topic, v.k, v.payload, COALESCE(v.headers, N'{}'), v.agg,
       COALESCE(v.mx, 5), COALESCE(v.at, GETUTCDATE()),
       NEXT VALUE FOR {{seq}} OVER (ORDER BY CAST(j.[key] AS INT))
  FROM OPENJSON(@p1) AS j
 CROSS APPLY OPENJSON(j.[value]) WITH (i UNIQUEIDENTIFIER '$.i', topic NVARCHAR(255) '$.topic', k NVARCHAR(255) '$.k',
       payload NVARCHAR(MAX) '$.payload', headers NVARCHAR(MAX) '$.headers', agg NVARCHAR(255) '$.agg',
       mx INT '$.max', at DATETIME2 '$.at') AS v;

-- name: SchemaCreate
IF SCHEMA_ID({{lit schema}}) IS NULL EXEC(N'CREATE SCHEMA {{q schema}}');

-- name: HistoryCreate
IF OBJECT_ID({{lit (qualify (q (obj "schema_history")))}}, N'U') IS NULL
CREATE TABLE {{q (obj "schema_history") | qualify}} (
    version INT NOT NULL PRIMARY KEY,
    name NVARCHAR(255) NOT NULL,
    checksum NVARCHAR(64) NOT NULL,
    applied_at DATETIME2 NOT NULL DEFAULT GETUTCDATE()
);

-- name: HistoryList
SELECT version, name, checksum, applied_at FROM {{q (obj "schema_history") | qualify}} ORDER BY version;

-- name: HistoryInsert
INSERT INTO {{q (obj "schema_history") | qualify}} (version, name, checksum) VALUES (@p1, @p2, @p3);

-- name: MigrationLock
DECLARE @r INT;
EXEC @r = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = -1;
IF @r < 0 THROW 50000, N'could not take the QueueBox migration lock', 1;

-- name: MigrationUnlock
EXEC sp_releaseapplock @Resource = @p1, @LockOwner = N'Session';

-- fragment: Probe
-- The last value of the sequence (the dot is a list: the sequence's literal,
-- then the table's), then, read after it, the running transactions: xmin,
-- the oldest transaction of another session still open (every transaction
-- with a smaller id has ended); next, one past the newest transaction id
-- (every transaction open when the sequence was read is below it); and
-- writer, the oldest transaction of another session that holds an intent or
-- exclusive lock on the table (an insert takes the table's IX lock before
-- it evaluates the sequence default, and keeps it until the transaction
-- ends), NULL when none does. A transaction is open in these views from its
-- first statement, before it draws a sequence value. Needs VIEW SERVER
-- STATE (VIEW DATABASE STATE on Azure SQL Database).
SET NOCOUNT ON;
DECLARE @last BIGINT = (SELECT COALESCE(CAST(last_used_value AS BIGINT), CAST(current_value AS BIGINT) - 1)
                          FROM sys.sequences WHERE object_id = OBJECT_ID({{index . 0}}));
DECLARE @next BIGINT = (SELECT MAX(transaction_id) + 1 FROM sys.dm_tran_active_transactions);
SELECT COALESCE(@last, 0),
       COALESCE((SELECT MIN(st.transaction_id) FROM sys.dm_tran_session_transactions AS st
                  WHERE st.session_id <> @@SPID), @next),
       @next,
       (SELECT MIN(l.request_owner_id) FROM sys.dm_tran_locks AS l
         WHERE l.resource_type = N'OBJECT' AND l.resource_database_id = DB_ID()
           AND l.resource_associated_entity_id = OBJECT_ID({{index . 1}})
           AND l.request_owner_type = N'TRANSACTION' AND l.request_status = N'GRANT'
           AND l.request_mode IN (N'IX', N'SIX', N'X') AND l.request_session_id <> @@SPID);

-- fragment: Writers
-- Open transactions of other sessions that hold an intent or exclusive lock
-- on the table (the dot, a literal): those that wrote rows of it, and only
-- they, may still commit rows that hold keyed rows back. Oldest first.
SELECT CAST(s.session_id AS BIGINT), st.transaction_id, a.transaction_begin_time, s.status,
       COALESCE(s.program_name, N''), COALESCE(LEFT(t.text, 200), N'')
  FROM sys.dm_tran_session_transactions AS st
  JOIN sys.dm_tran_active_transactions AS a ON a.transaction_id = st.transaction_id
  JOIN sys.dm_exec_sessions AS s ON s.session_id = st.session_id
  LEFT JOIN sys.dm_exec_connections AS c ON c.session_id = s.session_id
 OUTER APPLY sys.dm_exec_sql_text(c.most_recent_sql_handle) AS t
 WHERE st.session_id <> @@SPID
   AND EXISTS (SELECT 1 FROM sys.dm_tran_locks AS l
                WHERE l.request_owner_id = st.transaction_id AND l.request_owner_type = N'TRANSACTION'
                  AND l.resource_type = N'OBJECT' AND l.resource_database_id = DB_ID()
                  AND l.resource_associated_entity_id = OBJECT_ID({{.}})
                  AND l.request_status = N'GRANT' AND l.request_mode IN (N'IX', N'SIX', N'X'))
 ORDER BY st.transaction_id;

-- name: OutboxProbe
{{template "Probe" (list (lit seq) (lit t))}}

-- name: OutboxWriters
{{template "Writers" (lit t)}}

-- name: OtherRelays
-- Sessions of other relays on this server: user sessions with this
-- session's program name that another client process opened (the driver
-- sends its workstation name and process id at login; a session that sent
-- neither counts). Without VIEW SERVER STATE (VIEW SERVER PERFORMANCE
-- STATE on SQL Server 2022) a session sees only itself, so this counts
-- none.
SELECT COUNT(*) FROM sys.dm_exec_sessions
 WHERE is_user_process = 1 AND program_name = APP_NAME()
   AND NOT (COALESCE(host_name, N'') = HOST_NAME() AND COALESCE(host_process_id, -1) = @p1);

-- The inbox.

-- name: InboxReceive
-- @p1 JSON array of messages {s: source, m: message id, t: topic,
-- at: aggregate type, ai: aggregate id, p: payload, h: headers or null},
-- stored in array order. A message whose (source, message_id) exists is
-- not stored: the check holds its key range (UPDLOCK, HOLDLOCK) until the
-- commit, so two transactions storing the same pair take turns and the
-- second finds the first's row. A pair repeated in the array is stored
-- once, for its first copy. One result row per message, in order: its
-- ordinal (from 0), the inbox id, and whether this batch stored it.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @in TABLE (n INT PRIMARY KEY, source NVARCHAR(255) NOT NULL, message_id NVARCHAR(255) NOT NULL,
                   topic NVARCHAR(255) NOT NULL, aggregate_type NVARCHAR(255) NULL, aggregate_id NVARCHAR(255) NULL,
                   payload NVARCHAR(MAX) NOT NULL, headers NVARCHAR(MAX) NULL);
INSERT INTO @in (n, source, message_id, topic, aggregate_type, aggregate_id, payload, headers)
SELECT CAST(j.[key] AS INT), v.s, v.m, v.t, v.at, v.ai, v.p, v.h
  FROM OPENJSON(@p1) AS j
 CROSS APPLY OPENJSON(j.[value]) WITH (s NVARCHAR(255) '$.s', m NVARCHAR(255) '$.m', t NVARCHAR(255) '$.t',
       at NVARCHAR(255) '$.at', ai NVARCHAR(255) '$.ai', p NVARCHAR(MAX) '$.p', h NVARCHAR(MAX) '$.h') AS v;
DECLARE @new TABLE (n INT PRIMARY KEY);
INSERT INTO @new (n)
SELECT v.n
  FROM (SELECT n, source, message_id, ROW_NUMBER() OVER (PARTITION BY source, message_id ORDER BY n) AS nth FROM @in) AS v
 WHERE v.nth = 1
   AND NOT EXISTS (SELECT 1 FROM {{it}} AS i WITH (UPDLOCK, HOLDLOCK)
                    WHERE i.{{ic "source"}} = v.source AND i.{{ic "message_id"}} = v.message_id);
INSERT INTO {{it}} ({{ic "source"}}, {{ic "message_id"}}, {{ic "topic"}}, {{ic "aggregate_type"}}, {{ic "aggregate_id"}},
                    {{ic "payload"}}, {{ic "headers"}}, {{ic "sequence"}})
SELECT v.source, v.message_id, v.topic, v.aggregate_type, v.aggregate_id, v.payload, COALESCE(v.headers, N'{}'),
       NEXT VALUE FOR {{iseq}} OVER (ORDER BY v.n)
  FROM @in AS v
  JOIN @new AS w ON w.n = v.n;
SELECT v.n, CAST(i.{{ic "id"}} AS NVARCHAR(36)), CASE WHEN w.n IS NULL THEN 0 ELSE 1 END
  FROM @in AS v
  JOIN {{it}} AS i ON i.{{ic "source"}} = v.source AND i.{{ic "message_id"}} = v.message_id
  LEFT JOIN @new AS w ON w.n = v.n
 ORDER BY v.n;
COMMIT TRANSACTION;

-- name: InboxRelayLock
-- @p1 the lock's resource name (dialects.InboxRelayLockName). Taken first
-- in each relay transaction, owned by it (released at commit), without
-- waiting: 1 when this transaction has it, 0 when another relay holds it.
DECLARE @r INT;
EXEC @r = sp_getapplock @Resource = @p1, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;
SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;

-- name: InboxRelay
-- Run under InboxRelayLock. @p1 limit, @p2 settled watermark of the inbox
-- sequence (NULL: no gate), @p3 max_attempts of the outbox rows, @p4 a
-- sequence below which no row is received (0: from the oldest). As in the
-- PostgreSQL dialect: received rows in sequence order, keyed ones (a
-- non-empty aggregate_id) only up to the watermark; outbox rows with the
-- same id, their sequence drawn in inbox sequence order, except where an
-- outbox row has the id already; the rows marked relayed. One result row
-- per relayed row: its id, 1 when it got a new outbox row, its sequence.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @picked TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, seq BIGINT NOT NULL);
INSERT INTO @picked (id, seq)
SELECT TOP (@p1) i.{{ic "id"}}, i.{{ic "sequence"}}
  FROM {{it}} AS i
 WHERE i.{{ic "state"}} = N'received'
   AND i.{{ic "sequence"}} > @p4
   AND (i.{{ic "aggregate_id"}} IS NULL OR i.{{ic "aggregate_id"}} = N'' OR @p2 IS NULL OR i.{{ic "sequence"}} <= @p2)
 ORDER BY i.{{ic "sequence"}};
DECLARE @new TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, seq BIGINT NOT NULL);
INSERT INTO @new (id, seq)
SELECT p.id, p.seq
  FROM @picked AS p
 WHERE NOT EXISTS (SELECT 1 FROM {{t}} AS o WITH (UPDLOCK, HOLDLOCK) WHERE o.{{c "id"}} = p.id);
INSERT INTO {{t}} ({{c "id"}}, {{c "topic"}}, {{c "key"}}, {{c "payload"}}, {{c "headers"}}, {{c "aggregate_type"}},
                   {{c "max_attempts"}}, {{c "sequence"}})
SELECT i.{{ic "id"}}, i.{{ic "topic"}}, i.{{ic "aggregate_id"}}, i.{{ic "payload"}}, i.{{ic "headers"}}, i.{{ic "aggregate_type"}},
       @p3, NEXT VALUE FOR {{seq}} OVER (ORDER BY w.seq)
  FROM @new AS w
  JOIN {{it}} AS i ON i.{{ic "id"}} = w.id;
DECLARE @relayed TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
UPDATE i
   SET {{ic "state"}} = N'relayed',
       {{ic "relayed_at"}} = @now
OUTPUT inserted.{{ic "id"}} INTO @relayed (id)
  FROM {{it}} AS i
  JOIN @picked AS p ON p.id = i.{{ic "id"}}
 WHERE i.{{ic "state"}} = N'received';
SELECT CAST(r.id AS NVARCHAR(36)), CASE WHEN w.id IS NULL THEN 0 ELSE 1 END, p.seq
  FROM @relayed AS r
  JOIN @picked AS p ON p.id = r.id
  LEFT JOIN @new AS w ON w.id = r.id;

-- name: InboxProbe
{{template "Probe" (list (lit iseq) (lit it))}}

-- name: InboxWriters
{{template "Writers" (lit it)}}

-- name: InboxCountByState
SELECT {{ic "state"}}, COUNT_BIG(*) FROM {{it}} GROUP BY {{ic "state"}};

-- name: InboxOldestReceived
-- The received row with the smallest sequence, through the relay's index.
SELECT COALESCE((SELECT TOP (1) DATEDIFF_BIG(millisecond, {{ic "received_at"}}, SYSUTCDATETIME())
                   FROM {{it}} WHERE {{ic "state"}} = N'received' ORDER BY {{ic "sequence"}}), 0);


-- The destinations' state (V12): pauses, which every relay reads about
-- twice a second, and the circuits relays opened, for operators.

-- name: DestinationStates
SELECT name, paused, COALESCE(reason, N''), changed_at FROM {{q (obj "destinations") | qualify}} ORDER BY name;

-- name: DestinationPause
-- @p1 name, @p2 reason (NULL for none). changed_at moves only when the
-- destination was not paused; the last column says whether it was not.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @was BIT = (SELECT paused FROM {{q (obj "destinations") | qualify}} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p1);
IF @was IS NULL
    INSERT INTO {{q (obj "destinations") | qualify}} (name, paused, reason, changed_at) VALUES (@p1, 1, @p2, @now);
ELSE
    UPDATE {{q (obj "destinations") | qualify}}
       SET paused = 1, reason = @p2, changed_at = CASE WHEN paused = 1 THEN changed_at ELSE @now END
     WHERE name = @p1;
SELECT name, paused, COALESCE(reason, N''), changed_at, CAST(CASE WHEN @was = 1 THEN 0 ELSE 1 END AS BIT)
  FROM {{q (obj "destinations") | qualify}} WHERE name = @p1;
COMMIT TRANSACTION;

-- name: DestinationResume
-- @p1 name. No row when the destination was not paused.
SET NOCOUNT ON;
UPDATE {{q (obj "destinations") | qualify}}
   SET paused = 0, reason = NULL, changed_at = SYSUTCDATETIME()
OUTPUT inserted.name, inserted.paused, N'', inserted.changed_at
 WHERE name = @p1 AND paused = 1;

-- name: DestinationCircuitOpen
-- @p1 destination, @p2 replica, @p3 last error. A circuit reported again
-- keeps its opened_at.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
UPDATE {{q (obj "circuits") | qualify}} WITH (UPDLOCK, HOLDLOCK)
   SET seen_at = @now, last_error = @p3
 WHERE destination = @p1 AND replica = @p2;
IF @@ROWCOUNT = 0
    INSERT INTO {{q (obj "circuits") | qualify}} (destination, replica, opened_at, seen_at, last_error)
    VALUES (@p1, @p2, @now, @now, @p3);
COMMIT TRANSACTION;

-- name: DestinationCircuitsClosed
-- @p1 replica, @p2 JSON array of the destinations whose circuits it
-- closed; circuits no replica refreshed for a day go too.
SET NOCOUNT ON;
DELETE FROM {{q (obj "circuits") | qualify}}
 WHERE (replica = @p1 AND destination IN (SELECT [value] FROM OPENJSON(@p2)))
    OR seen_at < DATEADD(day, -1, SYSUTCDATETIME());

-- name: DestinationCircuits
-- @p1 how recently (ms) a circuit must have been refreshed to count.
SELECT destination, replica, opened_at, seen_at, COALESCE(last_error, N'')
  FROM {{q (obj "circuits") | qualify}}
 WHERE seen_at >= DATEADD(millisecond, -@p1, SYSUTCDATETIME())
 ORDER BY destination, opened_at, replica;

-- name: OutboxRowsOf
-- The rows @p1 (JSON ids), whole, as the relay's route filters read them:
-- for the operator commands that select by destination where a filter
-- decides.
SELECT CAST({{c "id"}} AS NVARCHAR(36)), {{c "topic"}}, COALESCE({{c "key"}}, N''), {{c "payload"}}, {{c "headers"}}, {{c "aggregate_type"}},
       {{c "attempt"}}, {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}
  FROM {{t}}
 WHERE {{c "id"}} IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p1));

-- name: OutboxRow
-- One row as an operator inspects it: @p1 its id (text).
SELECT CAST({{c "id"}} AS NVARCHAR(36)), {{c "topic"}}, {{c "key"}}, {{c "aggregate_type"}}, {{c "state"}}, {{c "attempt"}},
       {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}, {{c "updated_at"}}, {{c "scheduled_at"}},
       {{c "last_error"}}, {{c "payload"}}, {{c "headers"}}
  FROM {{t}}
 WHERE {{c "id"}} = CAST(@p1 AS UNIQUEIDENTIFIER);

-- name: AttemptsOfRow
-- The newest attempts of the row @p1 (text), newest first, at most @p2.
SELECT TOP (@p2) attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted, replayed_by,
       row_delivered_try, row_delivered_at
  FROM {{q (obj "attempts") | qualify}}
 WHERE row_id = CAST(@p1 AS UNIQUEIDENTIFIER)
 ORDER BY attempted_at DESC, n DESC;

-- name: AttemptsPurge
-- Deletes up to @p2 attempts made more than @p1 seconds ago, and counts
-- them.
SET NOCOUNT ON;
DELETE TOP (@p2) FROM {{q (obj "attempts") | qualify}} WITH (ROWLOCK, READPAST)
 WHERE attempted_at < DATEADD(second, -@p1, SYSUTCDATETIME());
SELECT @@ROWCOUNT;


-- Fan-out: the copies table (V16; see dialects.Copies). Its columns are
-- QueueBox's own, not mapped; [key] and [sequence] are bracketed. A batch
-- that makes copies pending draws one value of the change counter's
-- sequence (@change) for all of them, and only when it writes any.

-- name: FanOutComplete
-- OutboxCompleteAttempts for outcomes of fan-out rows, in one transaction:
-- @p1 the outcomes (see OutboxComplete; their attempt fields are not
-- read), @p2 JSON array of the attempts {i: the row, at, us, n, k, ds, st,
-- er, rs, p, u} (see OutboxCompleteAttempts; an outcome may carry
-- several), @p3 JSON array of the copies of the delivered rows {i: the
-- row, ds: destination, s: state (pending or dead), a: attempt, d: due
-- after ms, e: last_error, "" for none}. A copy takes the row's topic,
-- key, payload, headers, aggregate type, sequence, creation time and
-- max_attempts from the row itself, never from the caller; a copy of the
-- same row and destination (a replayed row's) is replaced, its claim and
-- lease cleared: the update holds the key range of the copies it looks
-- for (UPDLOCK, HOLDLOCK) until the commit, so the insert of those it did
-- not find races no one. Attempts and copies are written only for outcomes
-- that were written.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @done TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
{{template "CompleteUpdate" (printf "inserted.%s INTO @done" (c "id"))}}
INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
SELECT v.i, CONVERT(DATETIME2, v.at, 126), v.us, v.n, v.k, NULLIF(v.ds, N''), NULLIF(v.st, N''), NULLIF(v.er, N''), NULLIF(v.rs, N''),
       COALESCE(v.p, 0), 1 - COALESCE(v.u, 0)
  FROM OPENJSON(@p2) WITH (i UNIQUEIDENTIFIER '$.i', at NVARCHAR(40) '$.at', us BIGINT '$.us', n INT '$.n', k NVARCHAR(20) '$.k',
                           ds NVARCHAR(255) '$.ds', st NVARCHAR(255) '$.st', er NVARCHAR(MAX) '$.er', rs NVARCHAR(MAX) '$.rs',
                           p INT '$.p', u INT '$.u') AS v
 WHERE v.i IN (SELECT id FROM @done);
DECLARE @copies TABLE (row_id UNIQUEIDENTIFIER NOT NULL, destination NVARCHAR(255) NOT NULL, state NVARCHAR(50) NOT NULL,
                       attempt INT NOT NULL, delay_ms INT NOT NULL, err NVARCHAR(MAX) NULL, PRIMARY KEY (row_id, destination));
INSERT INTO @copies (row_id, destination, state, attempt, delay_ms, err)
SELECT v.i, v.ds, v.s, v.a, v.d, NULLIF(v.e, N'')
  FROM OPENJSON(@p3) WITH (i UNIQUEIDENTIFIER '$.i', ds NVARCHAR(255) '$.ds', s NVARCHAR(50) '$.s', a INT '$.a', d INT '$.d',
                           e NVARCHAR(MAX) '$.e') AS v
 WHERE v.i IN (SELECT id FROM @done);
DECLARE @change BIGINT;
IF EXISTS (SELECT 1 FROM @copies)
    SET @change = NEXT VALUE FOR {{copyseq}};
UPDATE x
   SET topic = o.{{c "topic"}}, [key] = o.{{c "key"}}, payload = o.{{c "payload"}}, headers = o.{{c "headers"}},
       aggregate_type = o.{{c "aggregate_type"}}, [sequence] = o.{{c "sequence"}}, row_created_at = o.{{c "created_at"}},
       state = v.state, attempt = v.attempt, max_attempts = o.{{c "max_attempts"}},
       scheduled_at = DATEADD(millisecond, v.delay_ms, @now), last_error = v.err,
       claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL, updated_at = @now, copy_change = @change
  FROM {{copies}} AS x WITH (UPDLOCK, HOLDLOCK)
  JOIN @copies AS v ON x.row_id = v.row_id AND x.destination = v.destination
  JOIN {{t}} AS o ON o.{{c "id"}} = v.row_id;
INSERT INTO {{copies}} (row_id, destination, topic, [key], payload, headers, aggregate_type, [sequence], row_created_at,
                        state, attempt, max_attempts, scheduled_at, created_at, updated_at, last_error, copy_change)
SELECT v.row_id, v.destination, o.{{c "topic"}}, o.{{c "key"}}, o.{{c "payload"}}, o.{{c "headers"}}, o.{{c "aggregate_type"}},
       o.{{c "sequence"}}, o.{{c "created_at"}}, v.state, v.attempt, o.{{c "max_attempts"}},
       DATEADD(millisecond, v.delay_ms, @now), @now, @now, v.err, @change
  FROM @copies AS v
  JOIN {{t}} AS o ON o.{{c "id"}} = v.row_id
 WHERE NOT EXISTS (SELECT 1 FROM {{copies}} AS x WITH (UPDLOCK, HOLDLOCK)
                    WHERE x.row_id = v.row_id AND x.destination = v.destination);
COMMIT TRANSACTION;
SELECT CAST(id AS NVARCHAR(36)) FROM @done;

-- name: FanOutBlockedLanes
-- @p1 JSON array of the keys of the rows a claim took: the lanes
-- (destination, key) among them that have a pending or processing copy.
-- A skip scan of the copies' lanes index: per key, the first destination,
-- then the next after the greatest found, until none is left; one seek
-- per lane and key and one more, whatever the copies of each lane number.
SET NOCOUNT ON;
DECLARE @keys TABLE (k NVARCHAR(255) PRIMARY KEY);
INSERT INTO @keys (k)
SELECT DISTINCT CAST([value] AS NVARCHAR(255)) FROM OPENJSON(@p1) WHERE CAST([value] AS NVARCHAR(255)) <> N'';
DECLARE @lanes TABLE (k NVARCHAR(255) NOT NULL, d NVARCHAR(255) NOT NULL, PRIMARY KEY (k, d));
INSERT INTO @lanes (k, d)
SELECT k.k, n.d
  FROM @keys AS k
 CROSS APPLY (SELECT TOP (1) x.destination AS d FROM {{copies}} AS x
               WHERE x.[key] = k.k AND x.state IN (N'pending', N'processing')
               ORDER BY x.destination) AS n;
WHILE @@ROWCOUNT > 0
    INSERT INTO @lanes (k, d)
    SELECT l.k, n.d
      FROM (SELECT k, MAX(d) AS d FROM @lanes GROUP BY k) AS l
     CROSS APPLY (SELECT TOP (1) x.destination AS d FROM {{copies}} AS x
                   WHERE x.[key] = l.k AND x.destination > l.d AND x.state IN (N'pending', N'processing')
                   ORDER BY x.destination) AS n;
SELECT d, k FROM @lanes;

-- fragment: CopyLaneHead
-- The keyed copy c is the head of its lane: no copy of the same
-- destination and key with a smaller sequence is pending or processing,
-- and no outbox row of the key with a smaller sequence is (its pass may
-- still write an earlier copy).
NOT EXISTS (SELECT 1 FROM {{copies}} AS b
             WHERE b.[key] = c.[key] AND b.destination = c.destination
               AND b.[sequence] < c.[sequence] AND b.state IN (N'pending', N'processing'))
AND NOT EXISTS (SELECT 1 FROM {{t}} AS b
                 WHERE b.{{c "key"}} = c.[key] AND b.{{c "sequence"}} < c.[sequence]
                   AND b.{{c "state"}} IN (N'pending', N'processing'))

-- name: CopyClaim
-- @p1 limit, @p2 the most heads (<= @p1), @p3 lease in ms, @p4 the claim
-- token. As in the PostgreSQL dialect: heads, due pending copies in
-- schedule order that head their lane (see CopyLaneHead) or have no key,
-- locked (UPDLOCK, READPAST, ROWLOCK); then for each keyed head the
-- pending copies of its lane right behind it in sequence order, up to the
-- first that is processing or not yet due, and before the key's first
-- pending or processing outbox row after the head; keyed heads share what
-- the limit leaves.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @heads TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, d NVARCHAR(255) NOT NULL, k NVARCHAR(255) NULL, seq BIGINT NOT NULL);
INSERT INTO @heads (id, d, k, seq)
SELECT TOP (@p2) c.id, c.destination, c.[key], c.[sequence]
  FROM {{copies}} AS c WITH (UPDLOCK, READPAST, ROWLOCK)
 WHERE c.state = N'pending'
   AND c.scheduled_at <= @now
   AND (c.[key] IS NULL OR c.[key] = N'' OR ({{template "CopyLaneHead"}}))
 ORDER BY c.scheduled_at;
DECLARE @keyed INT = (SELECT COUNT(*) FROM @heads WHERE k IS NOT NULL AND k <> N'');
DECLARE @per INT = (@p1 - (SELECT COUNT(*) FROM @heads)) / CASE WHEN @keyed > 0 THEN @keyed ELSE 1 END;
DECLARE @claim TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
INSERT INTO @claim (id) SELECT id FROM @heads;
INSERT INTO @claim (id)
SELECT f.id
  FROM @heads AS h
 CROSS APPLY (SELECT COALESCE((SELECT TOP (1) o.{{c "sequence"}} FROM {{t}} AS o
                                WHERE o.{{c "key"}} = h.k AND o.{{c "sequence"}} > h.seq
                                  AND o.{{c "state"}} IN (N'pending', N'processing')
                                ORDER BY o.{{c "sequence"}}), CAST(9223372036854775807 AS BIGINT)) AS upto) AS b
 CROSS APPLY (
       SELECT w.id
         FROM (SELECT TOP (@per) x.id,
                      MAX(CASE WHEN x.state = N'processing' OR x.scheduled_at > @now THEN 1 ELSE 0 END)
                          OVER (ORDER BY x.[sequence] ROWS UNBOUNDED PRECEDING) AS blocked
                 FROM {{copies}} AS x
                WHERE x.[key] = h.k AND x.destination = h.d
                  AND x.[sequence] > h.seq AND x.[sequence] < b.upto
                  AND x.state IN (N'pending', N'processing')
                ORDER BY x.[sequence]) AS w
        WHERE w.blocked = 0) AS f
 WHERE h.k IS NOT NULL AND h.k <> N'';
UPDATE x
   SET state = N'processing',
       claimed_at = @now,
       claim_token = CAST(@p4 AS UNIQUEIDENTIFIER),
       lease_expires_at = DATEADD(millisecond, @p3, @now),
       updated_at = @now
OUTPUT CAST(inserted.id AS NVARCHAR(36)), CAST(inserted.row_id AS NVARCHAR(36)), inserted.destination, inserted.topic,
       COALESCE(inserted.[key], N''), inserted.payload, inserted.headers, inserted.aggregate_type, inserted.attempt,
       inserted.max_attempts, inserted.[sequence], inserted.row_created_at
  FROM {{copies}} AS x
  JOIN @claim AS c ON x.id = c.id
 WHERE x.state = N'pending';
COMMIT TRANSACTION;

-- name: CopyRenewLeases
-- @p1 JSON array of {i: id, t: token} of the held copies, @p2 lease in
-- ms; as OutboxRenewLeases.
SET NOCOUNT ON;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
UPDATE x
   SET lease_expires_at = DATEADD(millisecond, @p2, @now)
OUTPUT CAST(inserted.id AS NVARCHAR(36))
  FROM {{copies}} AS x WITH (ROWLOCK, READPAST)
  JOIN OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', t UNIQUEIDENTIFIER '$.t') AS v
    ON x.id = v.i AND x.claim_token = v.t
 WHERE x.state = N'processing';

-- name: CopyComplete
-- OutboxCompleteAttempts for copies, in one transaction: @p1 as there,
-- by copy id; an attempt is recorded under the copy's outbox row with the
-- copy's destination. Copies written pending take a new change counter.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @change BIGINT;
IF EXISTS (SELECT 1 FROM OPENJSON(@p1) WITH (s NVARCHAR(50) '$.s') AS v WHERE v.s = N'pending')
    SET @change = NEXT VALUE FOR {{copyseq}};
DECLARE @done TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, row_id UNIQUEIDENTIFIER NOT NULL, destination NVARCHAR(255) NOT NULL);
UPDATE x
   SET state = v.s,
       attempt = x.attempt + v.a,
       scheduled_at = COALESCE(DATEADD(millisecond, v.d, @now), x.scheduled_at),
       last_error = CASE WHEN v.w = 1 THEN v.e ELSE x.last_error END,
       claimed_at = NULL,
       claim_token = NULL,
       lease_expires_at = NULL,
       updated_at = @now,
       copy_change = CASE WHEN v.s = N'pending' THEN @change ELSE x.copy_change END
OUTPUT inserted.id, inserted.row_id, inserted.destination INTO @done
  FROM {{copies}} AS x
  JOIN OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', t UNIQUEIDENTIFIER '$.t', s NVARCHAR(50) '$.s',
                           a INT '$.a', d INT '$.d', w INT '$.w', e NVARCHAR(MAX) '$.e') AS v
    ON x.id = v.i AND x.claim_token = v.t
 WHERE x.state = N'processing';
INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
SELECT d.row_id, CONVERT(DATETIME2, v.at, 126), v.us, v.n, v.k, d.destination, NULLIF(v.st, N''), NULLIF(v.er, N''), NULLIF(v.rs, N''),
       COALESCE(v.p, 0), 1 - COALESCE(v.u, 0)
  FROM OPENJSON(@p1) WITH (i UNIQUEIDENTIFIER '$.i', at NVARCHAR(40) '$.at', us BIGINT '$.us', n INT '$.n', k NVARCHAR(20) '$.k',
                           st NVARCHAR(255) '$.st', er NVARCHAR(MAX) '$.er', rs NVARCHAR(MAX) '$.rs',
                           p INT '$.p', u INT '$.u') AS v
  JOIN @done AS d ON d.id = v.i
 WHERE v.at IS NOT NULL;
COMMIT TRANSACTION;
SELECT CAST(id AS NVARCHAR(36)) FROM @done;

-- name: CopyReleaseExpired
-- @p1 limit, @p2 JSON array of claim tokens the caller still holds.
-- Processing copies whose lease has passed (or that have none) go back to
-- pending, attempt unchanged, with a new change counter; returns how many.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @released TABLE (id UNIQUEIDENTIFIER PRIMARY KEY);
UPDATE TOP (@p1) x
   SET state = N'pending',
       claimed_at = NULL,
       claim_token = NULL,
       lease_expires_at = NULL,
       updated_at = @now
OUTPUT inserted.id INTO @released
  FROM {{copies}} AS x WITH (ROWLOCK, READPAST)
 WHERE x.state = N'processing'
   AND (x.lease_expires_at IS NULL OR x.lease_expires_at <= @now)
   AND (x.claim_token IS NULL
        OR x.claim_token NOT IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p2)));
IF EXISTS (SELECT 1 FROM @released)
BEGIN
    DECLARE @change BIGINT;
    SET @change = NEXT VALUE FOR {{copyseq}};
    UPDATE x SET copy_change = @change FROM {{copies}} AS x JOIN @released AS r ON x.id = r.id;
END;
COMMIT TRANSACTION;
SELECT COUNT(*) FROM @released;

-- name: CopyProbe
-- The change counter (the last value its sequence handed out: it moves
-- when a batch that makes copies pending draws it, before that batch
-- commits), and how long, in ms, until the earliest pending copy
-- scheduled later comes due (NULL: none is).
SELECT COALESCE((SELECT COALESCE(CAST(last_used_value AS BIGINT), CAST(current_value AS BIGINT) - 1)
                   FROM sys.sequences WHERE object_id = OBJECT_ID({{lit copyseq}})), 0),
       (SELECT DATEDIFF_BIG(millisecond, SYSUTCDATETIME(), MIN(scheduled_at))
          FROM {{copies}}
         WHERE state = N'pending' AND scheduled_at > SYSUTCDATETIME());

-- name: CopyPurge
-- @p1 state, @p2 age in seconds, @p3 batch.
SET NOCOUNT ON;
DELETE TOP (@p3) FROM {{copies}} WITH (ROWLOCK, READPAST)
 WHERE state = @p1
   AND updated_at < DATEADD(second, -@p2, SYSUTCDATETIME());
SELECT @@ROWCOUNT;

-- name: CopyCounts
-- Copies per destination and state, and for pending ones how long, in ms,
-- the oldest due copy that heads its lane (no earlier copy of its
-- destination and key pending or processing) has waited since it came due
-- (0: none). One pass over the table: operators run it.
DECLARE @now DATETIME2 = SYSUTCDATETIME();
SELECT c.destination, c.state, COUNT_BIG(*),
       COALESCE(DATEDIFF_BIG(millisecond, MIN(CASE WHEN h.head = 1 THEN c.scheduled_at END), @now), 0)
  FROM {{copies}} AS c
 OUTER APPLY (SELECT CASE WHEN c.state = N'pending' AND c.scheduled_at <= @now
                           AND (COALESCE(c.[key], N'') = N'' OR NOT EXISTS (
                                SELECT 1 FROM {{copies}} AS b
                                 WHERE b.[key] = c.[key] AND b.destination = c.destination
                                   AND b.[sequence] < c.[sequence] AND b.state IN (N'pending', N'processing')))
                          THEN 1 ELSE 0 END AS head) AS h
 GROUP BY c.destination, c.state
 ORDER BY c.destination, c.state;

-- fragment: CopyFilter
-- The operator filter of copies: @states (JSON; empty: any), @ids the
-- outbox rows (JSON; NULL: any), @key (NULL: any), @since and @until (the
-- copy's updated_at), @error_text (text in last_error), @destination
-- (NULL: any).
(NOT EXISTS (SELECT 1 FROM OPENJSON(@states)) OR c.state IN (SELECT [value] FROM OPENJSON(@states)))
   AND (@ids IS NULL OR c.row_id IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@ids)))
   AND (@key IS NULL OR c.[key] = @key)
   AND (@since IS NULL OR c.updated_at >= @since)
   AND (@until IS NULL OR c.updated_at < @until)
   AND (@error_text IS NULL OR CHARINDEX(LOWER(@error_text), LOWER(c.last_error)) > 0)
   AND (@destination IS NULL OR c.destination = @destination)

-- fragment: CopyColumns
-- A copy as operators read it (see CopyList): created_at is the row's.
CAST(c.id AS NVARCHAR(36)), c.topic, c.[key], c.aggregate_type, c.state, c.attempt, c.max_attempts, c.[sequence],
       c.row_created_at, c.updated_at, c.last_error, c.destination, CAST(c.row_id AS NVARCHAR(36)), c.scheduled_at

-- name: CopyList
-- The copies the filter selects (see CopyFilter), newest update first,
-- after (@after_updated_at, @after_sequence, @after_destination) when set
-- (keyset: copies of one row share its sequence), at most @limit.
SELECT TOP (@limit) {{template "CopyColumns"}}
  FROM {{copies}} AS c
 WHERE {{template "CopyFilter"}}
   AND (@after_updated_at IS NULL OR c.updated_at < @after_updated_at
        OR (c.updated_at = @after_updated_at AND (c.[sequence] < @after_sequence
            OR (c.[sequence] = @after_sequence AND c.destination < @after_destination))))
 ORDER BY c.updated_at DESC, c.[sequence] DESC, c.destination DESC;

-- name: CopiesOfRow
-- The copies of the outbox row @p1 (text), by destination.
SELECT {{template "CopyColumns"}}
  FROM {{copies}} AS c
 WHERE c.row_id = CAST(@p1 AS UNIQUEIDENTIFIER)
 ORDER BY c.destination;

-- fragment: CopyReplayed
-- After @r was filled with the outbox row ids of the copies of the
-- destination @p1 put back: an entry in each row's history after its
-- latest one, outcome replayed, with the destination and who replayed (the
-- dot; NULL: nothing is recorded).
INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, replayed_by)
SELECT r.row_id, CASE WHEN l.at >= @now THEN DATEADD(microsecond, 1, l.at) ELSE @now END, 0, 0, N'replayed', @p1, {{.}}
  FROM @r AS r
 OUTER APPLY (SELECT MAX(a.attempted_at) AS at FROM {{q (obj "attempts") | qualify}} AS a WHERE a.row_id = r.row_id) AS l
 WHERE {{.}} IS NOT NULL;

-- name: CopyReplay
-- @p1 destination, @p2 JSON outbox row ids, @p3 JSON states that may be
-- replayed, @p4 who replayed (NULL: nothing recorded). The copies of @p1
-- of those rows in one of the states, never a processing one, go back to
-- pending: attempt 0, no error, due now, a new change counter. Returns how
-- many.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @change BIGINT;
SET @change = NEXT VALUE FOR {{copyseq}};
DECLARE @r TABLE (row_id UNIQUEIDENTIFIER PRIMARY KEY);
UPDATE c
   SET state = N'pending',
       attempt = 0,
       last_error = NULL,
       scheduled_at = @now,
       claimed_at = NULL,
       claim_token = NULL,
       lease_expires_at = NULL,
       updated_at = @now,
       copy_change = @change
OUTPUT inserted.row_id INTO @r
  FROM {{copies}} AS c
 WHERE c.row_id IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p2))
   AND c.destination = @p1
   AND c.state IN (SELECT [value] FROM OPENJSON(@p3))
   AND c.state <> N'processing';
{{template "CopyReplayed" "@p4"}}
COMMIT TRANSACTION;
SELECT COUNT(*) FROM @r;

-- name: CopyBackfill
-- @p1 destination, @p2 JSON outbox row ids, @p3 who (NULL: nothing
-- recorded). A pending copy of @p1, due now, for each of those rows that
-- is delivered and has no copy of @p1, made from the row; recorded in the
-- row's history as a replay to @p1. Returns how many.
SET NOCOUNT ON;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @now DATETIME2 = SYSUTCDATETIME();
DECLARE @change BIGINT;
SET @change = NEXT VALUE FOR {{copyseq}};
DECLARE @r TABLE (row_id UNIQUEIDENTIFIER PRIMARY KEY);
INSERT INTO {{copies}} (row_id, destination, topic, [key], payload, headers, aggregate_type, [sequence], row_created_at,
                        state, attempt, max_attempts, scheduled_at, created_at, updated_at, copy_change)
OUTPUT inserted.row_id INTO @r
SELECT o.{{c "id"}}, @p1, o.{{c "topic"}}, o.{{c "key"}}, o.{{c "payload"}}, o.{{c "headers"}}, o.{{c "aggregate_type"}},
       o.{{c "sequence"}}, o.{{c "created_at"}}, N'pending', 0, o.{{c "max_attempts"}}, @now, @now, @now, @change
  FROM {{t}} AS o
 WHERE o.{{c "id"}} IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p2))
   AND o.{{c "state"}} = N'delivered'
   AND NOT EXISTS (SELECT 1 FROM {{copies}} AS x WITH (UPDLOCK, HOLDLOCK)
                    WHERE x.row_id = o.{{c "id"}} AND x.destination = @p1);
{{template "CopyReplayed" "@p3"}}
COMMIT TRANSACTION;
SELECT COUNT(*) FROM @r;
