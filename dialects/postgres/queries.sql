-- Every statement QueueBox runs against PostgreSQL, rendered once for the
-- configured table and column names. See the dialects package doc for the
-- claim's two steps, and docs/internals.md for the plans on a large table.
-- A statement with many parameters names them (@limit): the dialect
-- renders them as $1, $2, ... once, and binds them from a Go struct whose
-- fields carry the same names (see dialects.Named). The others number
-- theirs ($1).

-- fragment: Gate
-- The settled watermark (see OutboxClaim) as the CTE gate: open (no gate)
-- and w. Its parameters: @settled the watermark (NULL: no gate),
-- @open_last and @open_next the open epochs' sequence values and
-- horizons, which this statement's own snapshot may settle, and @writers
-- the writers of the sequence that the last probe saw open (NULL: not
-- known). An epoch settles once its horizon is
-- at or below the snapshot's xmin, or below every one of those writers
-- that still runs in this snapshot (is not visible in it: a running
-- transaction newer than every one that ended is past the snapshot's
-- xmax, and not among its xip): the probe read them after every open
-- epoch's sequence value, so any transaction that drew a value up to it
-- and still ran then is among them, and one that is no longer running
-- here has ended before this snapshot, its rows visible to it. The second
-- rule is what settles rows in the claim itself while a transaction that
-- writes no outbox row holds xmin back.
gate_horizon AS (
    SELECT GREATEST(pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                    CASE WHEN @writers::bigint[] IS NULL THEN 0
                         ELSE COALESCE((SELECT min(r.x) FROM unnest(@writers::bigint[]) AS r(x)
                                         WHERE NOT pg_visible_in_snapshot(r.x::text::xid8, pg_current_snapshot())),
                                       9223372036854775807) END) AS x
), gate AS (
    SELECT @settled::bigint IS NULL AS open,
           GREATEST(@settled::bigint, (SELECT max(e.l) FROM unnest(@open_last::bigint[], @open_next::bigint[]) AS e(l, x)
                                  WHERE e.x <= (SELECT h.x FROM gate_horizon AS h))) AS w
)

-- fragment: Bounds
-- The relay's bounds as the CTE bounds: ok while the rewind counter stands
-- where they were made (the dot's first parameter; NULL: no bounds), the
-- floors of the groups of keys (its second), and the keys' positions: the
-- keys in bytewise order (its third) and their positions (its fourth).
bounds AS (
    SELECT {{index . 0}}::bigint IS NOT NULL
           AND {{index . 0}}::bigint = (SELECT counter FROM {{rewinds}}) AS ok,
           {{index . 1}}::bigint[] AS floors,
           {{index . 2}}::text[] AS pkeys,
           {{index . 3}}::bigint[] AS ppos
)

-- fragment: Settled
-- The keyed row x (the dot names it) is settled: the gate is open, or its
-- sequence is at or below the watermark.
((SELECT open FROM gate) OR {{.}}.{{c "sequence"}} <= (SELECT w FROM gate))

-- fragment: Floor
-- The floor of the key (the dot): a sequence below which no row of the
-- key's group (the bounds' floors, indexed by a hash of the key) is pending
-- or processing, while the bounds hold; 0 otherwise.
CASE WHEN (SELECT ok FROM bounds)
     THEN COALESCE((SELECT fl.f[(hashtext({{.}}) & (cardinality(fl.f) - 1)) + 1] FROM (SELECT floors AS f FROM bounds) AS fl), 0)
     ELSE 0 END

-- fragment: Position
-- The sequence from which the key (the dot) may have a pending or
-- processing row, after its position among the bounds' positions, while
-- the bounds hold (every row of the key up to the position is delivered or
-- dead); 0 when the key has none. A binary search (width_bucket) of the
-- keys, which are in bytewise order, hence the "C" collation.
COALESCE((SELECT CASE WHEN p.k[p.i] = {{.}} THEN p.p[p.i] + 1 END
            FROM (SELECT pkeys AS k, ppos AS p, width_bucket({{.}} COLLATE "C", pkeys) AS i
                    FROM bounds WHERE ok AND pkeys IS NOT NULL) AS p), 0)

-- fragment: Head
-- The row o (the dot names it), keyed, is the head of its key: no earlier
-- row of its key is pending or processing. One probe of
-- idx_outbox_key_sequence, backwards from the row (ORDER BY ... DESC LIMIT
-- 1) and down to the key's floor or position, whatever the statistics say about the
-- key: with one hot key they make a sequential scan look cheaper, and that
-- plan is quadratic. Backwards, because the front of a busy key's range in
-- the index is full of entries of rows already delivered (dead until
-- vacuum): a row behind a busy head finds its live predecessor at once; the
-- floor keeps a head's probe from walking the entries that a long
-- transaction elsewhere keeps alive, and the key's position, when the
-- relay knows it, from those of the rows delivered since the floors were
-- read.
(SELECT b.{{c "sequence"}} FROM {{t}} AS b
  WHERE b.{{c "key"}} = {{.}}.{{c "key"}}
    AND b.{{c "sequence"}} < {{.}}.{{c "sequence"}}
    AND b.{{c "sequence"}} >= GREATEST({{template "Floor" (printf "%s.%s" . (c "key"))}},
                                       {{template "Position" (printf "%s.%s" . (c "key"))}})
    AND b.{{c "state"}} IN ('pending', 'processing')
  ORDER BY b.{{c "key"}} DESC, b.{{c "sequence"}} DESC
  LIMIT 1) IS NULL

-- fragment: PendingByKey
-- The row x (the dot names it), found by its key and sequence, is pending,
-- in a form that only idx_outbox_key_sequence can serve: the IN proves that
-- index's filter, and the state compared with a subquery cannot prove the
-- filter of idx_outbox_pending_scheduled. With a plain state = 'pending'
-- the planner, told by the statistics that few rows are pending, chose to
-- find one key's row by walking the pending index with a filter on key and
-- sequence; while a long transaction kept the index's dead entries, each
-- such lookup walked all of them (seen: 28 ms per key, claims of seconds).
{{.}}.{{c "state"}} IN ('pending', 'processing') AND {{.}}.{{c "state"}} = (SELECT 'pending')

-- fragment: ClaimContinued
-- The keys whose run this replica finished (@continue_keys), each with
-- the run's last sequence (@continue_after): every row of the key up to it
-- is delivered or dead, so the key's first pending or processing row after
-- it is its head, found in one probe that starts past every row version the
-- runs left behind. While the bounds do not hold (a rewind may have put an
-- earlier row back) the probe starts at the key's first row. The head is
-- taken when it is pending, due and settled; at most @heads, in the order
-- given.
continued AS (
    SELECT f.tid, f.k, f.seq
      FROM unnest(@continue_keys::text[], @continue_after::bigint[]) WITH ORDINALITY AS c(k, pos, n)
     CROSS JOIN LATERAL (
           SELECT x.{{c "key"}} AS k, x.{{c "sequence"}} AS seq
             FROM {{t}} AS x
            WHERE x.{{c "key"}} = c.k
              AND x.{{c "sequence"}} > GREATEST(CASE WHEN (SELECT ok FROM bounds) THEN c.pos ELSE 0 END,
                                                {{template "Floor" "c.k"}} - 1)
              AND x.{{c "state"}} IN ('pending', 'processing')
            ORDER BY x.{{c "key"}}, x.{{c "sequence"}}
            LIMIT 1) AS h
     CROSS JOIN LATERAL (
           SELECT x.ctid AS tid, x.{{c "key"}}::text AS k, x.{{c "sequence"}} AS seq
             FROM {{t}} AS x
            WHERE x.{{c "key"}} = h.k AND x.{{c "sequence"}} = h.seq
              AND {{template "PendingByKey" "x"}}
              AND x.{{c "scheduled_at"}} <= now()
              AND {{template "Settled" "x"}}
              FOR UPDATE SKIP LOCKED) AS f
     ORDER BY c.n
     LIMIT @heads
)

-- fragment: ClaimFollowers
-- For each keyed head, the pending rows right behind it; the CTE heads has
-- tid, k and seq. Keyed heads share what the limit (@limit) leaves.
followers AS (
    SELECT f.tid
      FROM heads AS h
     CROSS JOIN LATERAL (
           SELECT w.tid, w.blocked
             FROM (SELECT x.ctid AS tid,
                          bool_or(x.{{c "state"}} = 'processing' OR x.{{c "scheduled_at"}} > now())
                              OVER (ORDER BY x.{{c "sequence"}}) AS blocked
                     FROM {{t}} AS x
                    WHERE x.{{c "key"}} = h.k
                      AND x.{{c "sequence"}} > h.seq
                      AND x.{{c "state"}} IN ('pending', 'processing')
                      AND {{template "Settled" "x"}}
                    ORDER BY x.{{c "sequence"}}
                    LIMIT (SELECT (@limit - count(*)) / GREATEST(count(*) FILTER (WHERE k IS NOT NULL AND k <> ''), 1) FROM heads)) AS w
            WHERE NOT w.blocked) AS f
     WHERE h.k IS NOT NULL AND h.k <> ''
)

-- fragment: ClaimUpdate
-- Stamps the heads and followers with the claim token (@token) and a lease
-- of @lease_ms, and returns the rows with the CTE cursor's key (where the
-- next claim by key goes on; NULL: none learnt), the CTE reach's reach
-- (how far in schedule order a walk that stopped at its limit got),
-- the claim's time, and when the earliest row the walk took became due.
-- The update finds the rows by ctid (a TID scan), not by a second walk of
-- the primary key: heads are locked, so their ctid cannot change under us,
-- and a follower that was updated meanwhile is re-checked against the new
-- version (state = 'pending') as READ COMMITTED does. The state is compared
-- with a subquery rather than a constant so that the planner cannot use
-- the partial pending index here: a plan made while the table was empty
-- chose that index (one row, it thought) and then walked every pending row
-- to find the claimed ones.
UPDATE {{t}} AS o
   SET {{c "state"}} = 'processing',
       {{c "claimed_at"}} = now(),
       {{c "claim_token"}} = @token,
       {{c "lease_expires_at"}} = now() + @lease_ms::bigint * interval '1 millisecond',
       {{c "updated_at"}} = now()
 WHERE o.ctid = ANY(ARRAY(SELECT tid FROM heads UNION ALL SELECT tid FROM followers))
   AND o.{{c "state"}} = (SELECT 'pending')
RETURNING o.{{c "id"}}, o.{{c "topic"}}, COALESCE(o.{{c "key"}}, ''), o.{{c "payload"}}, o.{{c "headers"}},
          o.{{c "aggregate_type"}}, o.{{c "attempt"}}, o.{{c "max_attempts"}}, o.{{c "sequence"}}, o.{{c "created_at"}},
          (SELECT k FROM cursor), (SELECT reach FROM reach), now(), (SELECT earliest FROM reach)

-- name: OutboxClaim
-- The claim that finds heads in schedule order: cheapest when heads are
-- plentiful (unkeyed rows, many keys with few rows each).
-- @limit the most rows, @lease_ms the lease, @token the claim token,
-- @heads the most heads (<= @limit); @settled, @open_last, @open_next and
-- @writers the gate (see Gate); @rewinds the rewind counter the bounds
-- were made at (NULL: no bounds), @lookback_ms how far back the walk looks
-- for due rows (NULL: from the start), @floors the floors of the groups of
-- keys (NULL: none), @position_keys and @position_after keys in bytewise
-- order and their positions, which bound the head rule's probe (NULL:
-- none); @continue_keys and @continue_after the keys to continue and their
-- positions.
--
-- gate: keyed rows are claimable only up to the watermark w: every
-- transaction that could still commit an earlier row of their key has ended
-- (see the dialects package doc). Epochs whose horizon is at or below this
-- snapshot's xmin are settled here, so a claim never waits for a probe.
-- bounds: whether what the relay knows still holds (no rewind since: a
-- replay, an expired lease, a stopping replica's release).
-- continued: the heads of the keys this replica just finished a run of.
-- walked: due pending rows in schedule order, from @lookback_ms ago, that are the
-- first pending/processing row of their key (or have no key; see Head),
-- locked with SKIP LOCKED. A row behind a head is never a head for anyone,
-- so no concurrent claimer can take it.
-- followers: for each keyed head, the pending rows right behind it, in
-- sequence order, up to the first row that is processing, waiting for a
-- retry, or beyond the watermark; the claim stays within @limit.
-- cursor: none (a walk in schedule order learns no key to go on after).
WITH {{template "Gate"}}, {{template "Bounds" (list "@rewinds" "@floors" "@position_keys" "@position_after")}}, {{template "ClaimContinued"}}, walked AS (
    SELECT o.ctid AS tid, o.{{c "key"}} AS k, o.{{c "sequence"}} AS seq, o.{{c "scheduled_at"}} AS at
      FROM {{t}} AS o
     WHERE o.{{c "state"}} = 'pending'
       AND o.{{c "scheduled_at"}} <= now()
       AND o.{{c "scheduled_at"}} >= CASE WHEN (SELECT ok FROM bounds) AND @lookback_ms::bigint IS NOT NULL
                                         THEN now() - @lookback_ms::bigint * interval '1 millisecond'
                                         ELSE '-infinity'::timestamptz END
       AND (o.{{c "key"}} IS NULL OR o.{{c "key"}} = '' OR (
            o.{{c "key"}} <> ALL(@continue_keys::text[])
            AND {{template "Settled" "o"}}
            AND {{template "Head" "o"}}))
     ORDER BY o.{{c "scheduled_at"}}
     LIMIT @heads - (SELECT count(*) FROM continued)
       FOR UPDATE SKIP LOCKED
), heads AS (
    SELECT tid, k, seq FROM continued
    UNION ALL
    SELECT tid, k, seq FROM walked
), cursor AS (
    SELECT NULL::text AS k
), reach AS (
    SELECT CASE WHEN count(*) > 0 AND count(*) >= @heads - (SELECT count(*) FROM continued) THEN max(at) END AS reach,
           min(at) AS earliest
      FROM walked
), {{template "ClaimFollowers"}}
{{template "ClaimUpdate"}}

-- name: OutboxClaimByKey
-- The claim that finds heads key by key: cheapest when few keys hold many
-- rows (hot keys), where a scan in schedule order passes over every row
-- behind a busy head. The parameters of OutboxClaim but @lookback_ms (it
-- walks no schedule); @after is the key to go on after (the last claim's
-- cursor; '' from the start), and @discover whether to discover keys at
-- all: without it (WalkNone) the claim takes only the heads of the keys it
-- continues, which start past the row versions their runs left behind,
-- while the walk over the keys below passes over them.
-- after, before: a skip scan of idx_outbox_key_sequence, one probe per key
-- that has pending or processing rows, giving each key's first such row (its
-- head): first the keys after @after, then, wrapping around, the keys up
-- to it.
-- The scan runs only as far as the claim needs heads: the keys take turns,
-- and a claim does not visit every key.
-- keyed: the heads that are pending, due and settled, each found by one
-- probe of idx_outbox_key_sequence (a lateral subquery, so that no plan can
-- join the walk to the whole pending set instead, as a plan made on an
-- empty table did with a hash join).
-- nullkey, emptykey: rows without a key, from the same index (its null and
-- empty-key ranges, in sequence order), so that this claim, like
-- OutboxClaim, considers every due row.
-- cursor: the greatest key whose head the walk took, where the next claim
-- by key goes on.
WITH RECURSIVE {{template "Gate"}}, {{template "Bounds" (list "@rewinds" "@floors" "@position_keys" "@position_after")}}, {{template "ClaimContinued"}}, after AS (
    (SELECT x.{{c "key"}} AS k, x.{{c "sequence"}} AS seq
       FROM {{t}} AS x
      WHERE @discover::bool AND x.{{c "state"}} IN ('pending', 'processing') AND x.{{c "key"}} > GREATEST(@after::text, '')
      ORDER BY x.{{c "key"}}, x.{{c "sequence"}}
      LIMIT 1)
    UNION ALL
    SELECT n.k, n.seq
      FROM after AS p
     CROSS JOIN LATERAL (
           SELECT x.{{c "key"}} AS k, x.{{c "sequence"}} AS seq
             FROM {{t}} AS x
            WHERE x.{{c "state"}} IN ('pending', 'processing') AND x.{{c "key"}} > p.k
            ORDER BY x.{{c "key"}}, x.{{c "sequence"}}
            LIMIT 1) AS n
), before AS (
    (SELECT x.{{c "key"}} AS k, x.{{c "sequence"}} AS seq
       FROM {{t}} AS x
      WHERE @discover::bool AND x.{{c "state"}} IN ('pending', 'processing') AND x.{{c "key"}} > '' AND x.{{c "key"}} <= @after::text
      ORDER BY x.{{c "key"}}, x.{{c "sequence"}}
      LIMIT 1)
    UNION ALL
    SELECT n.k, n.seq
      FROM before AS p
     CROSS JOIN LATERAL (
           SELECT x.{{c "key"}} AS k, x.{{c "sequence"}} AS seq
             FROM {{t}} AS x
            WHERE x.{{c "state"}} IN ('pending', 'processing') AND x.{{c "key"}} > p.k AND x.{{c "key"}} <= @after::text
            ORDER BY x.{{c "key"}}, x.{{c "sequence"}}
            LIMIT 1) AS n
), walk AS (
    SELECT k, seq FROM after
    UNION ALL
    SELECT k, seq FROM before
), keyed AS (
    SELECT o.tid, o.k, o.seq
      FROM walk AS p
     CROSS JOIN LATERAL (
           SELECT x.ctid AS tid, x.{{c "key"}}::text AS k, x.{{c "sequence"}} AS seq
             FROM {{t}} AS x
            WHERE x.{{c "key"}} = p.k AND x.{{c "sequence"}} = p.seq
              AND x.{{c "key"}} <> ALL(@continue_keys::text[])
              AND {{template "PendingByKey" "x"}}
              AND x.{{c "scheduled_at"}} <= now()
              AND {{template "Settled" "x"}}
              FOR UPDATE SKIP LOCKED) AS o
     LIMIT @heads - (SELECT count(*) FROM continued)
), nullkey AS (
    SELECT o.ctid AS tid, NULL::text AS k, o.{{c "sequence"}} AS seq
      FROM {{t}} AS o
     WHERE @discover::bool
       AND o.{{c "key"}} IS NULL
       AND o.{{c "state"}} IN ('pending', 'processing')
       AND o.{{c "state"}} = 'pending'
       AND o.{{c "scheduled_at"}} <= now()
     ORDER BY o.{{c "key"}}, o.{{c "sequence"}}
     LIMIT (SELECT @heads - count(*) FROM keyed) - (SELECT count(*) FROM continued)
       FOR UPDATE SKIP LOCKED
), emptykey AS (
    SELECT o.ctid AS tid, NULL::text AS k, o.{{c "sequence"}} AS seq
      FROM {{t}} AS o
     WHERE @discover::bool
       AND o.{{c "key"}} = ''
       AND o.{{c "state"}} IN ('pending', 'processing')
       AND o.{{c "state"}} = 'pending'
       AND o.{{c "scheduled_at"}} <= now()
     ORDER BY o.{{c "key"}}, o.{{c "sequence"}}
     LIMIT (SELECT @heads - count(*) FROM keyed) - (SELECT count(*) FROM nullkey) - (SELECT count(*) FROM continued)
       FOR UPDATE SKIP LOCKED
), heads AS (
    SELECT tid, k, seq FROM continued
    UNION ALL
    SELECT tid, k, seq FROM keyed
    UNION ALL
    SELECT tid, k, seq FROM nullkey
    UNION ALL
    SELECT tid, k, seq FROM emptykey
), cursor AS (
    SELECT max(k) AS k FROM keyed
), reach AS (
    SELECT NULL::timestamptz AS reach, NULL::timestamptz AS earliest
), {{template "ClaimFollowers"}}
{{template "ClaimUpdate"}}

-- name: OutboxStragglers
-- The oldest due row that a claim would take but that a walk looking back
-- @lookback_ms would not see, and that became due at most @within_ms ago
-- (NULL: at any time): how long ago, in ms, it became due (no row: none).
-- @settled, @open_last, @open_next and @writers the gate (see Gate),
-- @rewinds the rewind counter of the bounds, @floors the floors. It reads
-- every version between the two bounds, and takes no lock: the relay runs
-- it off the claims' path, as rarely as its cost asks, and lets its next
-- claim look back that far. The state compared with a subquery as well:
-- in a statement that locks nothing, the planner drops state = 'pending'
-- from the index's conditions (the partial index's filter implies it),
-- and a scan without a condition on the index's first column starts at
-- its first entry whatever the bound on scheduled_at; with >= on the
-- first column it starts at the bound.
WITH {{template "Gate"}}, {{template "Bounds" (list "@rewinds" "@floors" "NULL" "NULL")}}
SELECT (EXTRACT(EPOCH FROM now() - o.{{c "scheduled_at"}}) * 1000)::bigint
  FROM {{t}} AS o
 WHERE o.{{c "state"}} = 'pending'
   AND o.{{c "state"}} >= (SELECT 'pending')
   AND o.{{c "scheduled_at"}} < now() - @lookback_ms::bigint * interval '1 millisecond'
   AND o.{{c "scheduled_at"}} >= CASE WHEN @within_ms::bigint IS NULL THEN '-infinity'::timestamptz
                                     ELSE now() - @within_ms::bigint * interval '1 millisecond' END
   AND (o.{{c "key"}} IS NULL OR o.{{c "key"}} = '' OR ({{template "Settled" "o"}} AND {{template "Head" "o"}}))
 ORDER BY o.{{c "scheduled_at"}}
 LIMIT 1

-- name: OutboxHorizon
-- What holds the horizon back: the session, standby (a walsender's
-- feedback), prepared transaction or replication slot with the oldest
-- snapshot (its xmin; a transaction without one holds back from its own
-- id), the oldest first, and among those of one xmin the one that began
-- first (the others took their snapshots while it ran); this session and
-- the logical slots (which hold
-- only the catalogs) left out, and so are the statements that the relays'
-- own sessions (this session's application_name) are running: each is
-- bounded by a timeout, and a relay that took its own claim or probe over
-- a slow bulk insert for a long transaction would behave as under one for
-- nothing. A relay session left idle in a transaction still shows. Then
-- the outbox's dead row versions from the statistics. Other users'
-- sessions show their snapshots only to members of pg_read_all_stats (or
-- pg_monitor).
WITH h AS (
    SELECT CASE WHEN a.backend_type = 'walsender' THEN 'standby' ELSE 'transaction' END AS kind,
           a.pid::bigint AS pid, a.xact_start AS since, a.query_start AS query_start, COALESCE(a.state, '') AS state,
           COALESCE(a.application_name, '') AS name, COALESCE(left(a.query, 200), '') AS query,
           age(COALESCE(a.backend_xmin, a.backend_xid))::bigint AS xage
      FROM pg_stat_activity AS a
     WHERE COALESCE(a.backend_xmin, a.backend_xid) IS NOT NULL AND a.pid <> pg_backend_pid()
       AND NOT (a.state = 'active' AND a.backend_type = 'client backend'
                AND a.application_name = current_setting('application_name'))
    UNION ALL
    SELECT 'prepared transaction', 0, p.prepared, NULL, 'prepared', p.gid, '', age(p.transaction)::bigint
      FROM pg_prepared_xacts AS p
    UNION ALL
    SELECT 'replication slot', COALESCE(s.active_pid, 0)::bigint, NULL, NULL, CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
           s.slot_name::text, '', age(s.xmin)::bigint
      FROM pg_replication_slots AS s
     WHERE s.xmin IS NOT NULL
)
SELECT h.kind, h.pid, h.since, h.query_start, h.state, h.name, h.query, h.xage,
       COALESCE((SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = {{lit t}}::regclass), -1)
  FROM (SELECT NULL::int AS one) AS o
  LEFT JOIN LATERAL (SELECT * FROM h ORDER BY h.xage DESC, h.since ASC NULLS LAST LIMIT 1) AS h ON true

-- name: OutboxNextDue
-- How long, in ms, until the earliest pending row scheduled later comes
-- due (no value: none is). One probe of the pending_scheduled index: an idle
-- relay claims again then, rather than on every poll. The state compared
-- with a subquery as well, as in OutboxStragglers: the probe starts at now()
-- rather than at the index's first entry, past the entries of every row
-- that came due before, which a long transaction elsewhere keeps.
SELECT (EXTRACT(EPOCH FROM min({{c "scheduled_at"}}) - now()) * 1000)::bigint
  FROM {{t}}
 WHERE {{c "state"}} = 'pending' AND {{c "state"}} >= (SELECT 'pending') AND {{c "scheduled_at"}} > now()

-- name: OutboxFloors
-- The floor of every group of keys: the smallest sequence of a pending or
-- processing row of the group, or, for a group with none, the settled
-- watermark plus one ($2: every row up to it is visible to this statement;
-- a row beyond it may still commit). $1 the number of groups (a power of
-- two; the same hash as the claims' Floor). The rewind counter is read in
-- the same snapshot as the rows: floors that do not see a replay carry the
-- counter from before it, and are never taken for after it. This reads
-- every pending and processing entry of idx_outbox_key_sequence, and every
-- version a long transaction keeps there, but for those below $3, the
-- lowest of the floors read before at counter $4: while the counter has
-- not moved, no live row lies below it. That bound is a condition on the
-- index's second column: the entries below it are passed over in the
-- index, without a visit to the table for each (late in a ten-minute hold,
-- those visits were most of a read of 10 s, a quarter of them from outside
-- the shared buffers). The relay still runs it rarely.
SELECT (SELECT counter FROM {{rewinds}}),
       array_agg(LEAST(f.floor, $2::bigint + 1) ORDER BY g.g)
  FROM generate_series(0, $1::int - 1) AS g(g)
  LEFT JOIN (SELECT hashtext(x.{{c "key"}}) & ($1::int - 1) AS g, min(x.{{c "sequence"}}) AS floor
               FROM {{t}} AS x
              WHERE x.{{c "state"}} IN ('pending', 'processing') AND x.{{c "key"}} > ''
                AND x.{{c "sequence"}} >= COALESCE((SELECT CASE WHEN r.counter = $4::bigint THEN $3::bigint END FROM {{rewinds}} AS r),
                                                   '-9223372036854775808'::bigint)
              GROUP BY 1) AS f ON f.g = g.g

-- name: OutboxRenewLeases
-- $1 the held rows' ids, $2 their claim tokens (pairwise), $3 lease in ms.
-- Both lookups go by id, in the primary key, which holds a few versions of
-- each row: a walk of the processing index by token would pass over the
-- entry of every row claimed since a long transaction elsewhere began (see
-- CompleteUpdate for the state compared with a subquery). Rows that a
-- completion is writing right now are skipped rather than waited for: they
-- are being released anyway.
UPDATE {{t}}
   SET {{c "lease_expires_at"}} = now() + $3::bigint * interval '1 millisecond'
 WHERE {{c "id"}} = ANY(ARRAY(
         SELECT x.{{c "id"}}
           FROM {{t}} AS x
           JOIN unnest($1::uuid[], $2::uuid[]) AS v(id, token) ON x.{{c "id"}} = v.id AND x.{{c "claim_token"}} = v.token
          WHERE x.{{c "id"}} = ANY($1::uuid[])
            AND x.{{c "state"}} = (SELECT 'processing')
            FOR UPDATE OF x SKIP LOCKED))
   AND {{c "state"}} = (SELECT 'processing')
RETURNING {{c "id"}}

-- fragment: CompleteUpdate
-- The update of OutboxComplete and OutboxCompleteAttempts (see there). The
-- rows are found by id, in the primary key: the state is compared with a
-- subquery so that the planner cannot walk the processing index instead (a
-- plan made while few rows were processing did, with a filter on the ids,
-- and under a long transaction elsewhere that walk read every dead entry
-- of every row claimed since it began: 45,000 buffers for 64 rows).
UPDATE {{t}} AS o
   SET {{c "state"}} = v.state,
       {{c "attempt"}} = o.{{c "attempt"}} + v.attempt_inc,
       {{c "scheduled_at"}} = CASE WHEN v.delay_ms >= 0 THEN now() + v.delay_ms * interval '1 millisecond'
                                   ELSE o.{{c "scheduled_at"}} END,
       {{c "last_error"}} = CASE WHEN v.has_err THEN v.err ELSE o.{{c "last_error"}} END,
       {{c "claimed_at"}} = NULL,
       {{c "claim_token"}} = NULL,
       {{c "lease_expires_at"}} = NULL,
       {{c "updated_at"}} = now()
  FROM unnest(@ids::uuid[], @tokens::uuid[], @states::text[], @attempt_incs::int[], @delays_ms::bigint[], @errors::text[], @has_errors::bool[])
       AS v(id, token, state, attempt_inc, delay_ms, err, has_err)
 WHERE o.{{c "id"}} = ANY(@ids::uuid[])
   AND o.{{c "id"}} = v.id
   AND o.{{c "claim_token"}} = v.token
   AND o.{{c "state"}} = (SELECT 'processing')
RETURNING o.{{c "id"}}

-- name: OutboxComplete
-- One element of each array per outcome: @ids, @tokens, @states (the new
-- state), @attempt_incs, @delays_ms (the retry delay; negative keeps
-- scheduled_at), @errors, @has_errors (whether to write the error; else
-- last_error stays).
-- "id = ANY(@ids)" is redundant with the join, and there for the generic plan
-- of the prepared statement: without it the planner, blind to the arrays'
-- length, chose a plan 30 times slower after the fifth execution.
{{template "CompleteUpdate"}}

-- name: OutboxCompleteAttempts
-- OutboxComplete, and the attempt history in the same statement: one
-- element of each array per attempt: @attempt_ids (the row), @attempted_at
-- (when it started), @durations_us, @tries, @outcomes, @destinations,
-- @statuses, @attempt_errors, @responses (the response excerpt; "" for
-- none); and the rows whose attempt was a circuit's probe (@probe_ids) or
-- a failure not counted (@uncounted_ids), rare, so that the common attempt
-- binds nothing more. An attempt is recorded only when its
-- outcome was written: a lost claim records nothing, like its outcome.
WITH done(id) AS (
{{template "CompleteUpdate"}}
), recorded AS (
    INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
    SELECT a.id, a.at, a.us, a.try, a.outcome, NULLIF(a.dest, ''), NULLIF(a.status, ''), NULLIF(a.err, ''), NULLIF(a.resp, ''),
           a.id = ANY(@probe_ids::uuid[]), a.id <> ALL(@uncounted_ids::uuid[])
      FROM unnest(@attempt_ids::uuid[], @attempted_at::timestamptz[], @durations_us::bigint[], @tries::int[], @outcomes::text[], @destinations::text[], @statuses::text[], @attempt_errors::text[], @responses::text[])
           AS a(id, at, us, try, outcome, dest, status, err, resp)
     WHERE a.id IN (SELECT id FROM done)
)
SELECT id FROM done

-- name: OutboxReleaseExpired
-- $1 limit, $2 claim tokens the caller still holds (not released), $3 the
-- earliest claimed_at to look at (NULL: from the start). Returns how many
-- rows went back to pending, and moves the rewind counter when any did:
-- they keep their old schedule, behind what the relays have looked at.
-- Then the claimed_at of the oldest row processing from $3 on (the
-- released ones too), and the statement's clock: the next look may start
-- there (see the janitor), past the entries of every row claimed and
-- finished before, which a long transaction elsewhere keeps in the
-- processing index. The update finds the rows by their ids (the state
-- compared with a subquery keeps the planner off the processing index,
-- which it chose as a bitmap scan of every entry, dead ones too, before it
-- looked at the ids).
WITH r AS (
    UPDATE {{t}}
       SET {{c "state"}} = 'pending',
           {{c "claimed_at"}} = NULL,
           {{c "claim_token"}} = NULL,
           {{c "lease_expires_at"}} = NULL,
           {{c "updated_at"}} = now()
     WHERE {{c "id"}} = ANY(ARRAY(
             SELECT {{c "id"}} FROM {{t}}
              WHERE {{c "state"}} = 'processing'
                AND ($3::timestamptz IS NULL OR {{c "claimed_at"}} >= $3::timestamptz)
                AND ({{c "lease_expires_at"}} IS NULL OR {{c "lease_expires_at"}} <= now())
                AND ({{c "claim_token"}} IS NULL OR {{c "claim_token"}} <> ALL($2::uuid[]))
              ORDER BY {{c "claimed_at"}}
              LIMIT $1
                FOR UPDATE SKIP LOCKED))
       AND {{c "state"}} = (SELECT 'processing')
       AND ({{c "lease_expires_at"}} IS NULL OR {{c "lease_expires_at"}} <= now())
    RETURNING 1
){{template "Rewound"}}
SELECT (SELECT count(*)::int FROM r), (SELECT counter FROM moved),
       (SELECT min({{c "claimed_at"}}) FROM {{t}}
         WHERE {{c "state"}} = 'processing' AND ($3::timestamptz IS NULL OR {{c "claimed_at"}} >= $3::timestamptz)),
       now()

-- name: OutboxRewind
-- Moves the rewind counter: rows went back to pending behind what the
-- relays have looked at (a stopping replica released the rows it had not
-- started).
UPDATE {{rewinds}} SET counter = counter + 1

-- fragment: Rewound
-- The CTE moved, after a CTE r that returned a row for each row it put
-- back to pending: it moves the rewind counter when r put any back, in the
-- statement's own transaction, so that the counter moves with the commit.
-- It counts all of r first, so that every statement locks its rows before
-- the counter's row, never between them (two replays, which wait for row
-- locks, could otherwise deadlock).
, moved AS (
    UPDATE {{rewinds}} SET counter = counter + 1 WHERE (SELECT count(*) FROM r) > 0 RETURNING counter
)

-- fragment: Filter
-- The operator filter: @states, @ids (NULL: any), @key (NULL: any),
-- @since and @until (updated_at), @error_text (text in last_error).
{{c "state"}} = ANY(@states::text[])
   AND (@ids::uuid[] IS NULL OR {{c "id"}} = ANY(@ids::uuid[]))
   AND (@key::text IS NULL OR {{c "key"}} = @key::text)
   AND (@since::timestamptz IS NULL OR {{c "updated_at"}} >= @since::timestamptz)
   AND (@until::timestamptz IS NULL OR {{c "updated_at"}} < @until::timestamptz)
   AND (@error_text::text IS NULL OR strpos(lower({{c "last_error"}}), lower(@error_text::text)) > 0)

-- name: OutboxSelect
-- Operator selection: the filter (see Filter), the rows after
-- @after_sequence (keyset), at most @limit. Oldest first, for replay in
-- chunks.
SELECT {{c "id"}}, {{c "topic"}}, {{c "sequence"}}
  FROM {{t}}
 WHERE {{template "Filter"}}
   AND {{c "sequence"}} > @after_sequence::bigint
 ORDER BY {{c "sequence"}}
 LIMIT @limit

-- name: OutboxList
-- Like OutboxSelect, newest update first, with the columns operators read:
-- continues after the row (@after_updated_at, @after_sequence) when set
-- (keyset), at most @limit.
SELECT {{c "id"}}, {{c "topic"}}, {{c "key"}}, {{c "aggregate_type"}}, {{c "state"}}, {{c "attempt"}},
       {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}, {{c "updated_at"}}, {{c "last_error"}}
  FROM {{t}}
 WHERE {{template "Filter"}}
   AND (@after_updated_at::timestamptz IS NULL OR ({{c "updated_at"}}, {{c "sequence"}}) < (@after_updated_at::timestamptz, @after_sequence::bigint))
 ORDER BY {{c "updated_at"}} DESC, {{c "sequence"}} DESC
 LIMIT @limit

-- name: OutboxReplayIDs
-- $1 ids, $2 states that may be replayed. Never a processing row. Returns
-- how many rows it put back, and moves the rewind counter in the same
-- transaction: a claim whose snapshot sees a replayed row sees the counter
-- moved, and sets its bounds aside (see OutboxClaim). $3: who replayed,
-- recorded in each row's history after its latest attempt (NULL: nothing),
-- with, for a row that was delivered, its try and when its delivery was
-- written: the history records no first try that succeeds, which only the
-- row tells until the replay sets it back. was locks the rows and reads
-- them as they stand before the update. The row's copies (a fan-out
-- row's) go: its new pass delivers to every destination again, and
-- copies what does not end well there.
WITH was AS (
    SELECT {{c "id"}} AS id, {{c "state"}} AS state, {{c "attempt"}} AS attempt, {{c "updated_at"}} AS updated_at
      FROM {{t}}
     WHERE {{c "id"}} = ANY($1::uuid[])
       AND {{c "state"}} = ANY($2::text[])
       AND {{c "state"}} <> 'processing'
       FOR UPDATE
), r AS (
    UPDATE {{t}} AS o
       SET {{c "state"}} = 'pending',
           {{c "attempt"}} = 0,
           {{c "last_error"}} = NULL,
           {{c "scheduled_at"}} = now(),
           {{c "claimed_at"}} = NULL,
           {{c "claim_token"}} = NULL,
           {{c "lease_expires_at"}} = NULL,
           {{c "updated_at"}} = now()
      FROM was
     WHERE o.{{c "id"}} = was.id
       AND o.{{c "state"}} <> 'processing'
    RETURNING o.{{c "id"}} AS id, was.state AS was_state, was.attempt AS was_attempt, was.updated_at AS was_at
){{template "Rewound"}}, recorded AS (
    INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, replayed_by, row_delivered_try, row_delivered_at)
    SELECT r.id,
           GREATEST(now(), (SELECT max(a.attempted_at) + interval '1 microsecond'
                              FROM {{q (obj "attempts") | qualify}} AS a WHERE a.row_id = r.id)),
           0, 0, 'replayed', $3::text,
           CASE WHEN r.was_state = 'delivered' THEN r.was_attempt + 1 END,
           CASE WHEN r.was_state = 'delivered' THEN r.was_at END
      FROM r
     WHERE $3::text IS NOT NULL
), forgotten AS (
    DELETE FROM {{q (obj "copies") | qualify}} WHERE row_id IN (SELECT id FROM r)
)
SELECT (SELECT count(*)::int FROM r), (SELECT counter FROM moved)

-- name: OutboxPurge
-- $1 state, $2 age in ms, $3 batch.
DELETE FROM {{t}}
 WHERE {{c "id"}} = ANY(ARRAY(
         SELECT {{c "id"}} FROM {{t}}
          WHERE {{c "state"}} = $1::text
            AND {{c "updated_at"}} < now() - $2::bigint * interval '1 millisecond'
          LIMIT $3
            FOR UPDATE SKIP LOCKED))

-- name: OutboxPurgeWait
-- $1 state, $2 age in ms: how long, in ms, until the oldest row in the
-- state was last updated more than the age ago ($2 when none is in it).
-- Without an index on updated_at this reads the table, as a purge that
-- finds nothing does: the relay runs it when a purge found nothing more,
-- and purges again only then.
SELECT COALESCE((EXTRACT(EPOCH FROM min({{c "updated_at"}}) - now()) * 1000)::bigint + $2::bigint, $2::bigint)
  FROM {{t}}
 WHERE {{c "state"}} = $1::text

-- name: OutboxCountByState
SELECT {{c "state"}}, count(*) FROM {{t}} GROUP BY {{c "state"}}

-- name: OutboxDeadByTopic
SELECT {{c "topic"}}, count(*) FROM {{t}} WHERE {{c "state"}} = 'dead' GROUP BY {{c "topic"}}

-- name: OutboxPendingDue
-- How long the oldest row that the relay could claim now has waited since
-- it became due (0 when none is due), and how many pending rows are
-- scheduled later. Only a key's head (no earlier row of its key pending or
-- being delivered) and an unkeyed row can be claimed: a row behind its
-- key's head waits for that row, not for the relay, and does not count,
-- whether the head is due, held (a retry, a pause, an open circuit, a rate
-- limit, a row scheduled ahead) or being delivered. The walk reads the
-- pending_scheduled index, as the claim does, from the oldest due row, and
-- stops at the first head or unkeyed row; each row costs one probe of the
-- key_sequence index. It reads at most 10,000 due rows: when every one of
-- them waits behind its head, the figure is 0 (the heads were handled by
-- the relay just now, or they would be older than the rows behind them).
SELECT COALESCE(EXTRACT(EPOCH FROM now() - (
           SELECT w.at
             FROM (SELECT o.{{c "scheduled_at"}} AS at, o.{{c "key"}} AS k, o.{{c "sequence"}} AS seq
                     FROM {{t}} AS o
                    WHERE o.{{c "state"}} = 'pending' AND o.{{c "scheduled_at"}} <= now()
                    ORDER BY o.{{c "scheduled_at"}}
                    LIMIT 10000) AS w
            WHERE COALESCE(w.k, '') = ''
               OR NOT EXISTS (SELECT 1 FROM {{t}} AS e
                               WHERE e.{{c "key"}} = w.k AND e.{{c "sequence"}} < w.seq
                                 AND e.{{c "state"}} IN ('pending', 'processing'))
            ORDER BY w.at
            LIMIT 1)), 0)::float8,
       (SELECT count(*) FROM {{t}} WHERE {{c "state"}} = 'pending' AND {{c "scheduled_at"}} > now())

-- name: OutboxCountByTopicState
-- One pass over the table; the admin listener samples it on an interval.
SELECT {{c "topic"}}, {{c "state"}}, count(*) FROM {{t}} GROUP BY {{c "topic"}}, {{c "state"}}

-- name: OutboxBlockedKeys
-- Keys whose head (the first pending or processing row of the key) waits for
-- a retry. $1 bounds the rows scheduled later that are examined (the earliest
-- due first, from the pending_scheduled index), $2 the keys returned, the
-- longest waiting first; $3 caps the count of rows behind each head.
SELECT h.k, h.id, h.topic, h.attempt, h.max_attempts, h.last_error,
       EXTRACT(EPOCH FROM now() - h.created_at)::float8,
       EXTRACT(EPOCH FROM h.scheduled_at - now())::float8,
       (SELECT count(*) FROM (SELECT 1 FROM {{t}} AS b
                               WHERE b.{{c "key"}} = h.k AND b.{{c "sequence"}} > h.seq
                                 AND b.{{c "state"}} IN ('pending', 'processing')
                               LIMIT $3) AS behind)
  FROM (SELECT o.{{c "key"}} AS k, o.{{c "id"}} AS id, o.{{c "topic"}} AS topic, o.{{c "attempt"}} AS attempt,
               o.{{c "max_attempts"}} AS max_attempts, o.{{c "last_error"}} AS last_error,
               o.{{c "created_at"}} AS created_at, o.{{c "scheduled_at"}} AS scheduled_at, o.{{c "sequence"}} AS seq
          FROM {{t}} AS o
         WHERE o.{{c "state"}} = 'pending' AND o.{{c "scheduled_at"}} > now()
         ORDER BY o.{{c "scheduled_at"}}
         LIMIT $1) AS h
 WHERE h.k IS NOT NULL AND h.k <> '' AND h.attempt > 0
   AND NOT EXISTS (SELECT 1 FROM {{t}} AS b
                    WHERE b.{{c "key"}} = h.k AND b.{{c "sequence"}} < h.seq
                      AND b.{{c "state"}} IN ('pending', 'processing'))
 ORDER BY h.created_at, h.seq
 LIMIT $2

-- name: OutboxDeadGroups
-- The newest $1 dead rows (by updated_at, from the state_updated index)
-- grouped by topic and the first $2 characters of last_error, with the
-- group's newest update and ids (newest first). $1 bounds the work on a
-- table with millions of dead rows; the caller normalises the errors.
SELECT d.topic, d.err, count(*), max(d.updated_at), array_agg(d.id ORDER BY d.updated_at DESC, d.seq DESC)
  FROM (SELECT {{c "topic"}} AS topic, COALESCE(left({{c "last_error"}}, $2), '') AS err,
               {{c "updated_at"}} AS updated_at, {{c "sequence"}} AS seq, {{c "id"}} AS id
          FROM {{t}}
         WHERE {{c "state"}} = 'dead'
         ORDER BY {{c "updated_at"}} DESC
         LIMIT $1) AS d
 GROUP BY d.topic, d.err

-- name: OutboxInsert
-- One element of each array per new row (@ids, @topics, @keys, @payloads,
-- @headers, @aggregate_types, @max_attempts, @scheduled_at), inserted in
-- array order. NULLs take the column defaults (max_attempts 5, as the
-- column's default).
INSERT INTO {{t}} ({{c "id"}}, {{c "topic"}}, {{c "key"}}, {{c "payload"}}, {{c "headers"}},
                   {{c "aggregate_type"}}, {{c "max_attempts"}}, {{c "scheduled_at"}})
SELECT COALESCE(v.id, gen_random_uuid()), v.topic, v.k, v.payload, COALESCE(v.headers, '{}'::jsonb),
       v.aggregate_type, COALESCE(v.max_attempts, 5), COALESCE(v.scheduled_at, CURRENT_TIMESTAMP)
  FROM unnest(@ids::uuid[], @topics::text[], @keys::text[], @payloads::jsonb[], @headers::jsonb[], @aggregate_types::text[], @max_attempts::int[], @scheduled_at::timestamptz[])
       WITH ORDINALITY AS v(id, topic, k, payload, headers, aggregate_type, max_attempts, scheduled_at, n)
 ORDER BY v.n

-- name: HistoryCreate
CREATE TABLE IF NOT EXISTS {{q (obj "schema_history") | qualify}} (
    version INTEGER NOT NULL PRIMARY KEY,
    name VARCHAR(255) NOT NULL,
    checksum VARCHAR(64) NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
)

-- name: HistoryList
SELECT version, name, checksum, applied_at FROM {{q (obj "schema_history") | qualify}} ORDER BY version

-- name: HistoryInsert
INSERT INTO {{q (obj "schema_history") | qualify}} (version, name, checksum) VALUES ($1, $2, $3)

-- name: SchemaCreate
-- Run only when a schema is configured.
CREATE SCHEMA IF NOT EXISTS {{q schema}}

-- name: MigrationLock
-- $1 the lock's resource name. A session-level advisory lock: a second
-- migrator waits for it.
SELECT pg_advisory_lock(hashtext($1))

-- name: MigrationUnlock
SELECT pg_advisory_unlock(hashtext($1))


-- name: OutboxProbeSequence
-- The last value the outbox sequence handed out, and the rewind counter.
-- Sequences are not transactional: this reads the sequence's value as it
-- stands, drawn by transactions that may still be running (is_called is
-- false until the first value). The rewind counter is a row, read in the
-- statement's snapshot: it has moved once the rows it was moved for are
-- visible.
SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END,
       (SELECT r.counter FROM {{rewinds}} AS r)
  FROM {{seq}} AS s

-- fragment: Horizon
-- The next transaction id, widened to 64 bits from the snapshot's xmax (xmax
-- is one past the newest id that ended, and never a special id; age()
-- measures from the next id, so next = xmax + age(xmax)).
(SELECT x.xmax + age((x.xmax % 4294967296)::text::xid)
   FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax) AS x)

-- fragment: Widen
-- A 32-bit transaction id of pg_locks (the column x.transactionid), widened
-- to the 64-bit id nearest h.next, the next id read before pg_locks: a
-- running id is below it, and one assigned since (a new transaction or
-- subtransaction) a little above it. Not "below h.next always": an id
-- assigned between the two reads would be taken for one of the previous
-- epoch, 2^32 back.
h.next + (((x.transactionid::text::bigint - h.next % 4294967296 + 2147483648) % 4294967296 + 4294967296) % 4294967296 - 2147483648)

-- fragment: ProbeSnapshot
-- Run after the statement that reads the sequence (its dot), in a statement
-- of its own. xmin: every transaction with a smaller id has ended. next: the
-- next transaction id to be assigned, an upper bound of every id assigned
-- before the sequence was read. writers: the open transactions that drew
-- a value of the sequence (nextval takes a RowExclusiveLock on it, held by
-- the transaction until it ends; pg_locks is read live, after the
-- sequence), oldest first, NULL when none is; looked at only when some
-- transaction is running. One scan of pg_locks: a writer's relation lock
-- and its transaction-id locks share its virtual transaction. A
-- transaction that opened subtransactions holds a lock on each open one's
-- id too, all newer than its own: its own is the smallest. A writer whose
-- id is not seen beside its lock (a transaction being prepared, whose
-- locks move to the prepared transaction one partition at a time; a
-- nextval outside an insert, with no id) is -1: the caller then knows no
-- more than xmin.
WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin, {{template "Horizon"}} AS next)
SELECT h.xmin, h.next,
       CASE WHEN h.xmin < h.next THEN
           (SELECT array_agg(COALESCE(w.xid, -1) ORDER BY COALESCE(w.xid, -1))
              FROM (SELECT min({{template "Widen"}}) FILTER (WHERE x.locktype = 'transactionid') AS xid
                      FROM pg_locks AS x
                     WHERE x.granted
                       AND ((x.locktype = 'relation' AND x.relation = {{lit .}}::regclass AND x.mode = 'RowExclusiveLock')
                            OR (x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock'))
                     GROUP BY x.virtualtransaction
                    HAVING bool_or(x.locktype = 'relation')) AS w)
       END
  FROM h

-- fragment: Writers
-- Open transactions that drew values from the sequence (the dot): nextval
-- takes a RowExclusiveLock on it, held until the transaction ends. Each
-- with its own id, the smallest of its transaction-id locks (see
-- ProbeSnapshot). Prepared transactions have no process (pid NULL).
-- Oldest first.
WITH h AS (SELECT {{template "Horizon"}} AS next)
SELECT w.pid, w.xid, w.xact_start, w.state, w.name, w.query
  FROM (SELECT DISTINCT ON (l.virtualtransaction)
               COALESCE(l.pid, 0)::bigint AS pid, {{template "Widen"}} AS xid,
               a.xact_start, COALESCE(a.state, CASE WHEN l.pid IS NULL THEN 'prepared' ELSE '' END) AS state,
               COALESCE(a.application_name, '') AS name, COALESCE(left(a.query, 200), '') AS query
          FROM h, pg_locks AS l
          JOIN pg_locks AS x ON x.virtualtransaction = l.virtualtransaction AND x.locktype = 'transactionid'
                            AND x.mode = 'ExclusiveLock' AND x.granted
          LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
         WHERE l.locktype = 'relation' AND l.relation = {{lit .}}::regclass AND l.granted AND l.mode = 'RowExclusiveLock'
         ORDER BY l.virtualtransaction, 2) AS w
 ORDER BY w.xid

-- name: OutboxProbeSnapshot
{{template "ProbeSnapshot" seq}}

-- name: OutboxWriters
{{template "Writers" seq}}

-- name: OtherRelays
-- Sessions of other relays on this server: those with this session's
-- application name (every session of a relay has the same) that are not
-- the caller's ($1, its sessions' process ids), nor the workers of the
-- caller's parallel queries, nor sessions younger than two seconds (the
-- caller's own may be among them, not yet in $1). Every user sees every
-- session's application_name; its backend_type and backend_start only with
-- pg_read_all_stats or as the same user, so another user's sessions count
-- whatever their age and type.
-- The name is read back from the caller's own row, as the server keeps it
-- (cut to 63 bytes).
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = (SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid())
   AND pid <> ALL($1::int[])
   AND backend_type IS DISTINCT FROM 'parallel worker'
   AND (backend_start IS NULL OR backend_start < now() - interval '2 seconds')

-- The inbox.

-- name: InboxReceive
-- One element of each array per message, stored in array order: @sources,
-- @message_ids, @topics, @aggregate_types, @aggregate_ids, @payloads,
-- @headers (NULL: {}). A message whose (source, message_id)
-- exists is not stored: ON CONFLICT DO NOTHING, which also waits for an
-- uncommitted row of the same pair and then skips it. A pair repeated in
-- the arrays is stored once, for its first copy. One result row per
-- message, in order: its ordinal, the inbox id, and whether this statement
-- stored it. The id is NULL only when the row that made it a duplicate was
-- committed by another transaction after this statement's snapshot was
-- taken: the caller asks again for those, and a new statement sees it.
WITH v AS (
    SELECT *
      FROM unnest(@sources::text[], @message_ids::text[], @topics::text[], @aggregate_types::text[], @aggregate_ids::text[], @payloads::jsonb[], @headers::jsonb[])
           WITH ORDINALITY AS v(source, message_id, topic, aggregate_type, aggregate_id, payload, headers, n)
), ins AS (
    INSERT INTO {{it}} ({{ic "source"}}, {{ic "message_id"}}, {{ic "topic"}}, {{ic "aggregate_type"}},
                        {{ic "aggregate_id"}}, {{ic "payload"}}, {{ic "headers"}})
    SELECT v.source, v.message_id, v.topic, v.aggregate_type, v.aggregate_id, v.payload, COALESCE(v.headers, '{}'::jsonb)
      FROM v
     ORDER BY v.n
        ON CONFLICT ({{ic "source"}}, {{ic "message_id"}}) DO NOTHING
    RETURNING {{ic "id"}} AS id, {{ic "source"}} AS source, {{ic "message_id"}} AS message_id
)
SELECT v.n, COALESCE(ins.id, i.{{ic "id"}}),
       ins.id IS NOT NULL AND row_number() OVER (PARTITION BY v.source, v.message_id ORDER BY v.n) = 1
  FROM v
  LEFT JOIN ins ON ins.source = v.source AND ins.message_id = v.message_id
  LEFT JOIN {{it}} AS i ON ins.id IS NULL AND i.{{ic "source"}} = v.source AND i.{{ic "message_id"}} = v.message_id
 ORDER BY v.n

-- name: InboxRelayLock
-- $1 the lock's resource name (dialects.InboxRelayLockName). Taken first in
-- each relay transaction, in a statement of its own, so that the relay
-- statement's snapshot is taken after the lock: it then sees every row the
-- previous relay transaction marked relayed. Released at commit. Relays of
-- one inbox take turns; a relay that finds the lock taken does nothing.
SELECT pg_try_advisory_xact_lock(hashtext($1))

-- name: InboxRelay
-- Run under InboxRelayLock. @limit the most rows; @settled, @open_last,
-- @open_next and @writers the gate of the inbox sequence, as in OutboxClaim
-- (see Gate); @max_attempts of the outbox rows; @after the sequence value
-- to start after.
-- picked: received rows in sequence order; keyed ones (a non-empty
-- aggregate_id) only up to the watermark, so that no earlier row of their
-- aggregate can still commit. Unkeyed rows take part in no order.
-- created: the outbox rows, same id, inserted in inbox sequence order in
-- this one statement, so that their outbox sequence values keep that order
-- (the outbox's xid_first trigger fires for it as for any insert); an
-- outbox row that has the id already is left as it is.
-- The update marks the picked rows relayed and says which got a new
-- outbox row.
WITH {{template "Gate"}}, picked AS (
    SELECT i.{{ic "id"}} AS id, i.{{ic "topic"}} AS topic, i.{{ic "aggregate_type"}} AS aggregate_type,
           i.{{ic "aggregate_id"}} AS aggregate_id, i.{{ic "payload"}} AS payload, i.{{ic "headers"}} AS headers,
           i.{{ic "sequence"}} AS seq
      FROM {{it}} AS i
     WHERE i.{{ic "state"}} = 'received'
       AND i.{{ic "sequence"}} > @after::bigint
       AND (i.{{ic "aggregate_id"}} IS NULL OR i.{{ic "aggregate_id"}} = ''
            OR (SELECT open FROM gate) OR i.{{ic "sequence"}} <= (SELECT w FROM gate))
     ORDER BY i.{{ic "sequence"}}
     LIMIT @limit
), created AS (
    INSERT INTO {{t}} ({{c "id"}}, {{c "topic"}}, {{c "key"}}, {{c "payload"}}, {{c "headers"}},
                       {{c "aggregate_type"}}, {{c "max_attempts"}})
    SELECT p.id, p.topic, p.aggregate_id, p.payload, p.headers, p.aggregate_type, @max_attempts::int
      FROM picked AS p
     ORDER BY p.seq
        ON CONFLICT ({{c "id"}}) DO NOTHING
    RETURNING {{c "id"}} AS id
)
UPDATE {{it}} AS i
   SET {{ic "state"}} = 'relayed',
       {{ic "relayed_at"}} = now()
  FROM picked AS p
 WHERE i.{{ic "id"}} = p.id
   AND i.{{ic "state"}} = 'received'
RETURNING i.{{ic "id"}}, EXISTS (SELECT 1 FROM created AS c WHERE c.id = i.{{ic "id"}}), i.{{ic "sequence"}}

-- name: InboxProbeSequence
-- The last value the inbox sequence handed out (see OutboxProbeSequence);
-- InboxProbeSnapshot runs after it.
SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {{iseq}}

-- name: InboxProbeSnapshot
{{template "ProbeSnapshot" iseq}}

-- name: InboxWriters
{{template "Writers" iseq}}

-- name: InboxCountByState
SELECT {{ic "state"}}, count(*) FROM {{it}} GROUP BY {{ic "state"}}

-- name: InboxOldestReceived
-- The received row with the smallest sequence, through the relay's index.
SELECT COALESCE((SELECT EXTRACT(EPOCH FROM now() - {{ic "received_at"}})::float8
                   FROM {{it}} WHERE {{ic "state"}} = 'received'
                  ORDER BY {{ic "sequence"}} LIMIT 1), 0)


-- The destinations' state (V18): pauses, which every relay reads about
-- twice a second, and the circuits relays opened, for operators.

-- name: DestinationStates
SELECT name, paused, COALESCE(reason, ''), changed_at FROM {{q (obj "destinations") | qualify}} ORDER BY name

-- name: DestinationPause
-- $1 name, $2 reason (NULL for none). changed_at moves only when the
-- destination was not paused; the last column says whether it was not.
WITH old AS (
    SELECT paused FROM {{q (obj "destinations") | qualify}} WHERE name = $1
), up AS (
    INSERT INTO {{q (obj "destinations") | qualify}} AS d (name, paused, reason, changed_at)
    VALUES ($1, TRUE, $2, now())
    ON CONFLICT (name) DO UPDATE
       SET paused = TRUE,
           reason = EXCLUDED.reason,
           changed_at = CASE WHEN d.paused THEN d.changed_at ELSE EXCLUDED.changed_at END
    RETURNING name, paused, COALESCE(reason, '') AS reason, changed_at
)
SELECT up.name, up.paused, up.reason, up.changed_at, NOT COALESCE((SELECT paused FROM old), FALSE) FROM up

-- name: DestinationResume
-- $1 name. No row when the destination was not paused.
UPDATE {{q (obj "destinations") | qualify}}
   SET paused = FALSE, reason = NULL, changed_at = now()
 WHERE name = $1 AND paused
RETURNING name, paused, '', changed_at

-- name: DestinationCircuitOpen
-- $1 destination, $2 replica, $3 last error. A circuit reported again
-- keeps its opened_at.
INSERT INTO {{q (obj "circuits") | qualify}} AS c (destination, replica, opened_at, seen_at, last_error)
VALUES ($1, $2, now(), now(), $3)
ON CONFLICT (destination, replica) DO UPDATE
   SET seen_at = now(), last_error = EXCLUDED.last_error

-- name: DestinationCircuitsClosed
-- $1 replica, $2 the destinations whose circuits it closed; circuits no
-- replica refreshed for a day go too.
DELETE FROM {{q (obj "circuits") | qualify}}
 WHERE (replica = $1 AND destination = ANY($2::text[]))
    OR seen_at < now() - interval '1 day'

-- name: DestinationCircuits
-- $1 how recently (ms) a circuit must have been refreshed to count.
SELECT destination, replica, opened_at, seen_at, COALESCE(last_error, '')
  FROM {{q (obj "circuits") | qualify}}
 WHERE seen_at >= now() - $1::bigint * interval '1 millisecond'
 ORDER BY destination, opened_at, replica

-- name: OutboxRowsOf
-- The rows $1 (ids), whole, as the relay's route filters read them: for the
-- operator commands that select by destination where a filter decides.
SELECT {{c "id"}}, {{c "topic"}}, COALESCE({{c "key"}}, ''), {{c "payload"}}::text, {{c "headers"}}::text, {{c "aggregate_type"}},
       {{c "attempt"}}, {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}
  FROM {{t}}
 WHERE {{c "id"}} = ANY($1::uuid[])

-- name: OutboxRow
-- One row as an operator inspects it: $1 its id (text).
SELECT {{c "id"}}::text, {{c "topic"}}, {{c "key"}}, {{c "aggregate_type"}}, {{c "state"}}, {{c "attempt"}},
       {{c "max_attempts"}}, {{c "sequence"}}, {{c "created_at"}}, {{c "updated_at"}}, {{c "scheduled_at"}},
       {{c "last_error"}}, {{c "payload"}}::text, {{c "headers"}}::text
  FROM {{t}}
 WHERE {{c "id"}} = $1::uuid

-- name: AttemptsOfRow
-- The newest attempts of the row $1 (text), newest first, at most $2.
SELECT attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted, replayed_by,
       row_delivered_try, row_delivered_at
  FROM {{q (obj "attempts") | qualify}}
 WHERE row_id = $1::uuid
 ORDER BY attempted_at DESC
 LIMIT $2

-- name: AttemptsPurge
-- Deletes up to $2 attempts made more than $1 ms ago, oldest first, and
-- counts them.
WITH gone AS (
    DELETE FROM {{q (obj "attempts") | qualify}}
     WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM {{q (obj "attempts") | qualify}}
              WHERE attempted_at < now() - $1::bigint * interval '1 millisecond'
              ORDER BY attempted_at
              LIMIT $2))
    RETURNING 1
)
SELECT count(*)::int FROM gone


-- Fan-out: the copies table (V24; see dialects.Copies). Its columns are
-- QueueBox's own, not mapped; "key" and "sequence" are quoted.

-- name: FanOutComplete
-- OutboxCompleteAttempts for outcomes of fan-out rows, in one statement:
-- the outcomes (see OutboxComplete); the attempts, one element of each
-- array per attempt (an outcome may carry several: a pass tries several
-- destinations), with @probe_ns and @uncounted_ns the ordinals (from 1) of
-- the attempts that were a circuit's probe or a failure not counted; and
-- the copies of the delivered rows, one element of each array per copy:
-- @copy_ids (the outbox row), @copy_destinations, @copy_states (pending or
-- dead), @copy_attempts, @copy_delays_ms (due after), @copy_errors (""
-- leaves last_error null). A copy takes the row's topic, key, payload,
-- headers, aggregate type, sequence, creation time and max_attempts from
-- the row itself (its version before this statement's update: the same
-- values), never from the caller; a copy of the same row and destination
-- (a replayed row's) is replaced, its claim and lease cleared. Attempts and
-- copies are written only for outcomes that were written.
WITH done(id) AS (
{{template "CompleteUpdate"}}
), recorded AS (
    INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
    SELECT a.id, a.at, a.us, a.try, a.outcome, NULLIF(a.dest, ''), NULLIF(a.status, ''), NULLIF(a.err, ''), NULLIF(a.resp, ''),
           a.n = ANY(@probe_ns::int[]), a.n <> ALL(@uncounted_ns::int[])
      FROM unnest(@attempt_ids::uuid[], @attempted_at::timestamptz[], @durations_us::bigint[], @tries::int[], @outcomes::text[], @destinations::text[], @statuses::text[], @attempt_errors::text[], @responses::text[])
           WITH ORDINALITY AS a(id, at, us, try, outcome, dest, status, err, resp, n)
     WHERE a.id IN (SELECT id FROM done)
), copied AS (
    INSERT INTO {{copies}} AS x (row_id, destination, topic, "key", payload, headers, aggregate_type, "sequence", row_created_at,
                                 state, attempt, max_attempts, scheduled_at, last_error)
    SELECT o.{{c "id"}}, v.dest, o.{{c "topic"}}, o.{{c "key"}}, o.{{c "payload"}}, o.{{c "headers"}}, o.{{c "aggregate_type"}},
           o.{{c "sequence"}}, o.{{c "created_at"}}, v.state, v.attempt, o.{{c "max_attempts"}},
           now() + v.delay_ms * interval '1 millisecond', NULLIF(v.err, '')
      FROM unnest(@copy_ids::uuid[], @copy_destinations::text[], @copy_states::text[], @copy_attempts::int[], @copy_delays_ms::bigint[], @copy_errors::text[])
           AS v(id, dest, state, attempt, delay_ms, err)
      JOIN {{t}} AS o ON o.{{c "id"}} = v.id
     WHERE o.{{c "id"}} = ANY(@copy_ids::uuid[])
       AND v.id IN (SELECT id FROM done)
        ON CONFLICT (row_id, destination) DO UPDATE
       SET topic = EXCLUDED.topic, "key" = EXCLUDED."key", payload = EXCLUDED.payload, headers = EXCLUDED.headers,
           aggregate_type = EXCLUDED.aggregate_type, "sequence" = EXCLUDED."sequence", row_created_at = EXCLUDED.row_created_at,
           state = EXCLUDED.state, attempt = EXCLUDED.attempt, max_attempts = EXCLUDED.max_attempts,
           scheduled_at = EXCLUDED.scheduled_at, last_error = EXCLUDED.last_error,
           claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL, updated_at = now(),
           copy_change = nextval({{lit copyseq}})
)
SELECT id FROM done

-- name: FanOutBlockedLanes
-- The lanes (destination, key) that have a pending or processing copy,
-- among the keys of the rows that the claim $1 (its token) took in this
-- transaction: run after the claim, in its transaction, where now() is the
-- claim's claimed_at, so that the claimed rows are found in the processing
-- index (collected into an array first: a DISTINCT over the rows
-- themselves lets the planner walk the key index in key order instead,
-- past every pending row's entry, as a plan made on a small table did).
-- Per key, one probe of the copies' lanes index per lane and one more (a
-- skip scan over the destinations), whatever the copies of each lane
-- number.
WITH RECURSIVE claimed AS (
    SELECT DISTINCT u.k
      FROM unnest(ARRAY(
             SELECT o.{{c "key"}}::text
               FROM {{t}} AS o
              WHERE o.{{c "state"}} = 'processing'
                AND o.{{c "claimed_at"}} = now()
                AND o.{{c "claim_token"}} = $1::uuid
                AND o.{{c "key"}} <> '')) AS u(k)
), lanes AS (
    SELECT c.k, (SELECT x.destination FROM {{copies}} AS x
                  WHERE x."key" = c.k AND x.state IN ('pending', 'processing')
                  ORDER BY x."key", x.destination
                  LIMIT 1) AS d
      FROM claimed AS c
    UNION ALL
    SELECT l.k, (SELECT x.destination FROM {{copies}} AS x
                  WHERE x."key" = l.k AND x.destination > l.d AND x.state IN ('pending', 'processing')
                  ORDER BY x."key", x.destination
                  LIMIT 1)
      FROM lanes AS l
     WHERE l.d IS NOT NULL
)
SELECT d, k FROM lanes WHERE d IS NOT NULL

-- fragment: CopyLaneHead
-- The keyed copy (the dot names it) is the head of its lane: no copy of
-- the same destination and key with a smaller sequence is pending or
-- processing, and no outbox row of the key with a smaller sequence is
-- (its pass may still write an earlier copy).
NOT EXISTS (SELECT 1 FROM {{copies}} AS b
             WHERE b."key" = {{.}}."key" AND b.destination = {{.}}.destination
               AND b."sequence" < {{.}}."sequence" AND b.state IN ('pending', 'processing'))
AND NOT EXISTS (SELECT 1 FROM {{t}} AS b
                 WHERE b.{{c "key"}} = {{.}}."key" AND b.{{c "sequence"}} < {{.}}."sequence"
                   AND b.{{c "state"}} IN ('pending', 'processing'))

-- name: CopyClaim
-- $1 limit, $2 the most heads (<= $1), $3 lease in ms, $4 the claim token.
-- heads: due pending copies in schedule order that are their lane's head
-- (see CopyLaneHead) or have no key, locked with SKIP LOCKED: a copy
-- behind a head is never a head for anyone while the head is pending or
-- processing, so no concurrent claimer can take it.
-- followers: for each keyed head, the pending copies of its lane right
-- behind it in sequence order, up to the first that is processing or not
-- yet due, and before the key's first pending or processing outbox row
-- after the head (upto); keyed heads share what the limit leaves.
WITH heads AS (
    SELECT c.ctid AS tid, c.destination AS d, c."key" AS k, c."sequence" AS seq
      FROM {{copies}} AS c
     WHERE c.state = 'pending'
       AND c.scheduled_at <= now()
       AND (c."key" IS NULL OR c."key" = '' OR ({{template "CopyLaneHead" "c"}}))
     ORDER BY c.scheduled_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), followers AS (
    SELECT f.tid
      FROM heads AS h
     CROSS JOIN LATERAL (
           SELECT COALESCE((SELECT o.{{c "sequence"}} FROM {{t}} AS o
                             WHERE o.{{c "key"}} = h.k AND o.{{c "sequence"}} > h.seq
                               AND o.{{c "state"}} IN ('pending', 'processing')
                             ORDER BY o.{{c "key"}}, o.{{c "sequence"}}
                             LIMIT 1), 9223372036854775807) AS upto) AS b
     CROSS JOIN LATERAL (
           SELECT w.tid
             FROM (SELECT x.ctid AS tid,
                          bool_or(x.state = 'processing' OR x.scheduled_at > now()) OVER (ORDER BY x."sequence") AS blocked
                     FROM {{copies}} AS x
                    WHERE x."key" = h.k AND x.destination = h.d
                      AND x."sequence" > h.seq AND x."sequence" < b.upto
                      AND x.state IN ('pending', 'processing')
                    ORDER BY x."sequence"
                    LIMIT (SELECT ($1 - count(*)) / GREATEST(count(*) FILTER (WHERE k IS NOT NULL AND k <> ''), 1) FROM heads)) AS w
            WHERE NOT w.blocked) AS f
     WHERE h.k IS NOT NULL AND h.k <> ''
)
UPDATE {{copies}} AS c
   SET state = 'processing',
       claimed_at = now(),
       claim_token = $4,
       lease_expires_at = now() + $3::bigint * interval '1 millisecond',
       updated_at = now()
 WHERE c.ctid = ANY(ARRAY(SELECT tid FROM heads UNION ALL SELECT tid FROM followers))
   AND c.state = (SELECT 'pending')
RETURNING c.id, c.row_id, c.destination, c.topic, COALESCE(c."key", ''), c.payload, c.headers, c.aggregate_type,
          c.attempt, c.max_attempts, c."sequence", c.row_created_at

-- name: CopyRenewLeases
-- $1 the held copies' ids, $2 their claim tokens (pairwise), $3 lease in
-- ms; as OutboxRenewLeases.
UPDATE {{copies}}
   SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
 WHERE id = ANY(ARRAY(
         SELECT x.id
           FROM {{copies}} AS x
           JOIN unnest($1::uuid[], $2::uuid[]) AS v(id, token) ON x.id = v.id AND x.claim_token = v.token
          WHERE x.id = ANY($1::uuid[])
            AND x.state = (SELECT 'processing')
            FOR UPDATE OF x SKIP LOCKED))
   AND state = (SELECT 'processing')
RETURNING id

-- name: CopyComplete
-- OutboxCompleteAttempts for copies: the outcomes by copy id (@ids,
-- @tokens, @states, @attempt_incs, @delays_ms, @errors, @has_errors), and
-- their attempts (@attempt_ids the copy, ...; see OutboxCompleteAttempts),
-- recorded under the copy's outbox row with the copy's destination. A copy
-- written pending draws a new change counter.
WITH done AS (
    UPDATE {{copies}} AS x
       SET state = v.state,
           attempt = x.attempt + v.attempt_inc,
           scheduled_at = CASE WHEN v.delay_ms >= 0 THEN now() + v.delay_ms * interval '1 millisecond' ELSE x.scheduled_at END,
           last_error = CASE WHEN v.has_err THEN v.err ELSE x.last_error END,
           claimed_at = NULL,
           claim_token = NULL,
           lease_expires_at = NULL,
           updated_at = now(),
           copy_change = CASE WHEN v.state = 'pending' THEN nextval({{lit copyseq}}) ELSE x.copy_change END
      FROM unnest(@ids::uuid[], @tokens::uuid[], @states::text[], @attempt_incs::int[], @delays_ms::bigint[], @errors::text[], @has_errors::bool[])
           AS v(id, token, state, attempt_inc, delay_ms, err, has_err)
     WHERE x.id = ANY(@ids::uuid[])
       AND x.id = v.id
       AND x.claim_token = v.token
       AND x.state = (SELECT 'processing')
    RETURNING x.id, x.row_id, x.destination
), recorded AS (
    INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, status, error, response, probe, counted)
    SELECT d.row_id, a.at, a.us, a.try, a.outcome, d.destination, NULLIF(a.status, ''), NULLIF(a.err, ''), NULLIF(a.resp, ''),
           a.id = ANY(@probe_ids::uuid[]), a.id <> ALL(@uncounted_ids::uuid[])
      FROM unnest(@attempt_ids::uuid[], @attempted_at::timestamptz[], @durations_us::bigint[], @tries::int[], @outcomes::text[], @destinations::text[], @statuses::text[], @attempt_errors::text[], @responses::text[])
           AS a(id, at, us, try, outcome, dest, status, err, resp)
      JOIN done AS d ON d.id = a.id
)
SELECT id FROM done

-- name: CopyReleaseExpired
-- $1 limit, $2 claim tokens the caller still holds. Processing copies
-- whose lease has passed (or that have none) go back to pending, attempt
-- unchanged, with a new change counter; returns how many.
WITH r AS (
    UPDATE {{copies}}
       SET state = 'pending',
           claimed_at = NULL,
           claim_token = NULL,
           lease_expires_at = NULL,
           updated_at = now(),
           copy_change = nextval({{lit copyseq}})
     WHERE id = ANY(ARRAY(
             SELECT id FROM {{copies}}
              WHERE state = 'processing'
                AND (lease_expires_at IS NULL OR lease_expires_at <= now())
                AND (claim_token IS NULL OR claim_token <> ALL($2::uuid[]))
              ORDER BY claimed_at
              LIMIT $1
                FOR UPDATE SKIP LOCKED))
       AND state = (SELECT 'processing')
       AND (lease_expires_at IS NULL OR lease_expires_at <= now())
    RETURNING 1
)
SELECT count(*)::int FROM r

-- name: CopyProbe
-- The change counter (the last value its sequence handed out: it moves
-- when a write that makes a copy pending draws it, which may be before
-- that write commits), and how long, in ms, until the earliest pending
-- copy scheduled later comes due (NULL: none is); one probe of the pending
-- index (the state compared with a subquery too: see OutboxNextDue).
SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END,
       (SELECT (EXTRACT(EPOCH FROM min(c.scheduled_at) - now()) * 1000)::bigint
          FROM {{copies}} AS c
         WHERE c.state = 'pending' AND c.state >= (SELECT 'pending') AND c.scheduled_at > now())
  FROM {{copyseq}} AS s

-- name: CopyPurge
-- $1 state, $2 age in ms, $3 batch.
DELETE FROM {{copies}}
 WHERE id = ANY(ARRAY(
         SELECT id FROM {{copies}}
          WHERE state = $1::text
            AND updated_at < now() - $2::bigint * interval '1 millisecond'
          LIMIT $3
            FOR UPDATE SKIP LOCKED))

-- name: CopyCounts
-- Copies per destination and state, and for pending ones how long, in ms,
-- the oldest due copy that heads its lane (no earlier copy of its
-- destination and key pending or processing) has waited since it came due
-- (0: none). One pass over the table: operators run it.
SELECT c.destination, c.state, count(*),
       COALESCE((EXTRACT(EPOCH FROM now() - min(CASE WHEN c.state = 'pending' AND c.scheduled_at <= now()
                                                       AND (COALESCE(c."key", '') = '' OR NOT EXISTS (
                                                            SELECT 1 FROM {{copies}} AS b
                                                             WHERE b."key" = c."key" AND b.destination = c.destination
                                                               AND b."sequence" < c."sequence" AND b.state IN ('pending', 'processing')))
                                                      THEN c.scheduled_at END)) * 1000)::bigint, 0)
  FROM {{copies}} AS c
 GROUP BY c.destination, c.state
 ORDER BY c.destination, c.state

-- fragment: CopyFilter
-- The operator filter of copies: @states (empty: any), @ids the outbox
-- rows (NULL: any), @key (NULL: any), @since and @until (the copy's
-- updated_at), @error_text (text in last_error), @destination (NULL: any).
(cardinality(@states::text[]) = 0 OR c.state = ANY(@states::text[]))
   AND (@ids::uuid[] IS NULL OR c.row_id = ANY(@ids::uuid[]))
   AND (@key::text IS NULL OR c."key" = @key::text)
   AND (@since::timestamptz IS NULL OR c.updated_at >= @since::timestamptz)
   AND (@until::timestamptz IS NULL OR c.updated_at < @until::timestamptz)
   AND (@error_text::text IS NULL OR strpos(lower(c.last_error), lower(@error_text::text)) > 0)
   AND (@destination::text IS NULL OR c.destination = @destination::text)

-- fragment: CopyColumns
-- A copy as operators read it (see CopyList): created_at is the row's.
c.id, c.topic, c."key", c.aggregate_type, c.state, c.attempt, c.max_attempts, c."sequence", c.row_created_at,
       c.updated_at, c.last_error, c.destination, c.row_id, c.scheduled_at

-- name: CopyList
-- The copies the filter selects (see CopyFilter), newest update first,
-- after (@after_updated_at, @after_sequence, @after_destination) when set
-- (keyset: copies of one row share its sequence), at most @limit.
SELECT {{template "CopyColumns"}}
  FROM {{copies}} AS c
 WHERE {{template "CopyFilter"}}
   AND (@after_updated_at::timestamptz IS NULL
        OR (c.updated_at, c."sequence", c.destination) < (@after_updated_at::timestamptz, @after_sequence::bigint, @after_destination::text))
 ORDER BY c.updated_at DESC, c."sequence" DESC, c.destination DESC
 LIMIT @limit

-- name: CopiesOfRow
-- The copies of the outbox row $1, by destination.
SELECT {{template "CopyColumns"}}
  FROM {{copies}} AS c
 WHERE c.row_id = $1::uuid
 ORDER BY c.destination

-- fragment: CopyReplayed
-- The CTE recorded, after a CTE r that returned the outbox row id (row_id)
-- of every copy of the destination $1 it put back: an entry in each row's
-- history after its latest one, outcome replayed, with the destination and
-- who replayed (the dot; NULL: nothing is recorded).
, recorded AS (
    INSERT INTO {{q (obj "attempts") | qualify}} (row_id, attempted_at, duration_us, try, outcome, destination, replayed_by)
    SELECT r.row_id,
           GREATEST(now(), (SELECT max(a.attempted_at) + interval '1 microsecond'
                              FROM {{q (obj "attempts") | qualify}} AS a WHERE a.row_id = r.row_id)),
           0, 0, 'replayed', $1::text, {{.}}::text
      FROM r
     WHERE {{.}}::text IS NOT NULL
)

-- name: CopyReplay
-- $1 destination, $2 outbox row ids, $3 states that may be replayed, $4
-- who replayed (NULL: nothing recorded). The copies of $1 of those rows in
-- one of the states, never a processing one, go back to pending: attempt
-- 0, no error, due now, a new change counter. Returns how many.
WITH r AS (
    UPDATE {{copies}} AS c
       SET state = 'pending',
           attempt = 0,
           last_error = NULL,
           scheduled_at = now(),
           claimed_at = NULL,
           claim_token = NULL,
           lease_expires_at = NULL,
           updated_at = now(),
           copy_change = nextval({{lit copyseq}})
     WHERE c.row_id = ANY($2::uuid[])
       AND c.destination = $1::text
       AND c.state = ANY($3::text[])
       AND c.state <> 'processing'
    RETURNING c.row_id
){{template "CopyReplayed" "$4"}}
SELECT count(*)::int FROM r

-- name: CopyBackfill
-- $1 destination, $2 outbox row ids, $3 who (NULL: nothing recorded). A
-- pending copy of $1, due now, for each of those rows that is delivered
-- and has no copy of $1, made from the row, in sequence order; recorded in
-- the row's history as a replay to $1. Returns how many.
WITH r AS (
    INSERT INTO {{copies}} (row_id, destination, topic, "key", payload, headers, aggregate_type, "sequence", row_created_at,
                            state, attempt, max_attempts, scheduled_at)
    SELECT o.{{c "id"}}, $1::text, o.{{c "topic"}}, o.{{c "key"}}, o.{{c "payload"}}, o.{{c "headers"}}, o.{{c "aggregate_type"}},
           o.{{c "sequence"}}, o.{{c "created_at"}}, 'pending', 0, o.{{c "max_attempts"}}, now()
      FROM {{t}} AS o
     WHERE o.{{c "id"}} = ANY($2::uuid[])
       AND o.{{c "state"}} = 'delivered'
     ORDER BY o.{{c "sequence"}}
        ON CONFLICT (row_id, destination) DO NOTHING
    RETURNING row_id
){{template "CopyReplayed" "$3"}}
SELECT count(*)::int FROM r
