package sqlserver_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
	"github.com/queuebox/queuebox/dialects/sqlserver"
	"github.com/queuebox/queuebox/migrations"
)

var renamed = dialects.Names{
	Schema: "app", Outbox: "events_out", Inbox: "events_in",
	OutboxColumns: map[string]string{"key": "message_key", "state": "status", "sequence": "seq_no"},
}

// Every statement renders for renamed names: no template markers left, the
// physical names quoted, the logical ones gone where they were renamed.
func TestQueriesRenderForRenamedNames(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	for name, sql := range dialects.Statements(q) {
		if sql == "" {
			t.Errorf("%s is empty", name)
			continue
		}
		if strings.Contains(sql, "{{") {
			t.Errorf("%s has an unrendered template marker", name)
		}
		switch name {
		case "OutboxProbe":
			if !strings.Contains(sql, "OBJECT_ID(N'[app].[events_out_sequence_seq]')") {
				t.Errorf("the probe does not read the renamed sequence:\n%s", sql)
			}
			continue
		case "OutboxHorizon":
			// It reads the server's transaction views only, and leaves
			// out what the relays' own sessions are running.
			if !strings.Contains(sql, "s.program_name = APP_NAME()") {
				t.Errorf("the horizon read counts the relays' own requests:\n%s", sql)
			}
			continue
		}
		if strings.HasPrefix(name, "Outbox") {
			if !strings.Contains(sql, "[app].[events_out]") {
				t.Errorf("%s does not name the qualified table [app].[events_out]:\n%s", name, sql)
			}
			if regexp.MustCompile(`(^|[^.])\[(key|state|sequence)\]`).MatchString(sql) {
				t.Errorf("%s still names a renamed column:\n%s", name, sql)
			}
		}
	}
}

func TestClaimUsesLockHintsAndHeadRule(t *testing.T) {
	q, err := sqlserver.Queries(dialects.DefaultNames())
	if err != nil {
		t.Fatal(err)
	}
	claim := q.OutboxClaim.SQL()
	for _, want := range []string{
		"WITH (UPDLOCK, READPAST, ROWLOCK)",
		"BEGIN TRANSACTION", "COMMIT TRANSACTION", "SET XACT_ABORT ON",
		"SYSUTCDATETIME()",            // the database clock
		"b.[sequence] < o.[sequence]", // the head rule
		"b.[state] IN (N'pending', N'processing')",
		"DATEADD(millisecond, @lease_ms, @now)", // the lease
		"CAST(@token AS UNIQUEIDENTIFIER)",      // the token, a parameter
		"ROWS UNBOUNDED PRECEDING",              // followers stop at the first blocker
		// the gate: keyed heads and followers up to the settled watermark
		"(@settled IS NULL OR o.[sequence] <= @settled) AND NOT EXISTS",
		"AND (@settled IS NULL OR x.[sequence] <= @settled)",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("the claim lacks %q", want)
		}
	}
	complete := q.OutboxComplete
	for _, want := range []string{"o.[claim_token] = v.t", "WHERE o.[state] = N'processing'", "OPENJSON(@p1)"} {
		if !strings.Contains(complete, want) {
			t.Errorf("the completion lacks %q", want)
		}
	}
	if rowsOf := q.OutboxRowsOf; !strings.Contains(rowsOf, "IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@p1))") ||
		!strings.Contains(rowsOf, "COALESCE([key], N'')") {
		t.Errorf("OutboxRowsOf reads the rows of a JSON array of ids:\n%s", rowsOf)
	}
	// No statement carries a row value: every value is a parameter.
	for name, sql := range dialects.Statements(q) {
		if regexp.MustCompile(`N'[0-9a-f]{8}-`).MatchString(sql) {
			t.Errorf("%s embeds a uuid literal", name)
		}
	}
}

// The JSON parameter of a completion carries exactly what the transition
// table says.
func TestCompleteArg(t *testing.T) {
	id, tok := uuid.New(), uuid.New()
	arg := sqlserver.CompleteArg([]dialects.Outcome{
		{Claim: dialects.Claim{ID: id, Token: tok}, Kind: dialects.OutcomeRetry, Delay: 1500 * time.Millisecond, Error: `it's "bad"`},
		{Claim: dialects.Claim{ID: id, Token: tok}, Kind: dialects.OutcomeRelease},
	})
	var got []map[string]any
	if err := json.Unmarshal([]byte(arg), &got); err != nil {
		t.Fatal(err)
	}
	if got[0]["s"] != "pending" || got[0]["a"] != 1.0 || got[0]["d"] != 1500.0 || got[0]["w"] != 1.0 || got[0]["e"] != `it's "bad"` || got[0]["i"] != id.String() {
		t.Errorf("retry arg %v", got[0])
	}
	if got[1]["s"] != "pending" || got[1]["a"] != 0.0 || got[1]["d"] != nil || got[1]["w"] != 0.0 {
		t.Errorf("release arg %v", got[1])
	}
}

// Every SQL Server migration renders, with GO splitting batches so that
// CREATE statements that must start a batch do.
func TestMigrationsRender(t *testing.T) {
	ms, err := migrations.Load("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	var v11 []string
	for _, m := range ms {
		batches, err := migrations.Render("sqlserver", sqlserver.Quoting, m, renamed)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range batches {
			if strings.Contains(b, "{{") || regexp.MustCompile(`(?m)^\s*GO\s*$`).MatchString(b) {
				t.Errorf("V%d: a batch kept a marker or a GO line:\n%s", m.Version, b)
			}
		}
		if m.Version == 11 {
			v11 = batches
		}
	}
	joined := strings.Join(v11, "\n")
	for _, want := range []string{"CREATE SEQUENCE [app].[events_out_sequence_seq]", "ROW_NUMBER() OVER (ORDER BY [created_at], [id])",
		"DEFAULT NEXT VALUE FOR [app].[events_out_sequence_seq] FOR [seq_no]", "CREATE INDEX [idx_events_out_key_sequence] ON [app].[events_out] ([message_key], [seq_no])",
		"WHERE [status] IN ('pending', 'processing')"} {
		if !strings.Contains(joined, want) {
			t.Errorf("V11 lacks %q", want)
		}
	}
}

// The conformance suite, against a real SQL Server when one is configured.
func TestConformance(t *testing.T) {
	dialecttest.Run(t, harness(t))
}

// harness is the conformance suites' harness on the SQL Server of
// QUEUEBOX_TEST_SQLSERVER_URL; it skips the test when none is configured.
func harness(t *testing.T) dialecttest.Harness {
	url := os.Getenv("QUEUEBOX_TEST_SQLSERVER_URL")
	if url == "" {
		t.Skip("QUEUEBOX_TEST_SQLSERVER_URL is not set: no SQL Server to run the conformance suite against")
	}
	fresh := func(t *testing.T) *sqlserver.Dialect {
		names := dialects.DefaultNames()
		names.Schema = "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
		d, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: url, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	return dialecttest.Harness{
		New: func(t *testing.T, upTo int) dialects.Dialect {
			d := fresh(t)
			if upTo == 0 {
				upTo = 1 << 30
			}
			if _, err := migrations.UpTo(context.Background(), d, upTo); err != nil {
				t.Fatal(err)
			}
			return d
		},
		Empty:       func(t *testing.T) dialects.Dialect { return fresh(t) },
		Unreachable: unreachable,
		Named: func(t *testing.T, app string) dialects.Dialect {
			names := dialects.DefaultNames()
			names.Schema = "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
			// Each with a workstation name of its own: SQL Server tells
			// relays apart by workstation and process, and these share the
			// test's process.
			d, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: withWorkstation(t, url, "qb-"+uuid.NewString()[:8]), Names: names, ApplicationName: app})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			if _, err := migrations.Up(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			return d
		},
		Exec: func(t *testing.T, d dialects.Dialect, sql string, args ...any) {
			q, err := render(d, sql)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.(*sqlserver.Dialect).DB().Exec(q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		},
		BackdateUpdated: `UPDATE {{t}} SET {{c "updated_at"}} = DATEADD(hour, -$2, SYSUTCDATETIME()) WHERE {{c "state"}} = $1`,
		Begin:           begin,
		RefusedLogin: func(t *testing.T) error {
			u, err := neturl.Parse(url)
			if err != nil {
				t.Fatal(err)
			}
			u.User = neturl.UserPassword("qb_no_such_login", "x")
			d, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: u.String(), Names: dialects.DefaultNames()})
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Ping(context.Background())
		},
		RefusedBecause: "Login failed for user 'qb_no_such_login'",
	}
}

// heldTx is a transaction a conformance subtest holds open.
type heldTx struct {
	d       *sqlserver.Dialect
	tx      *sql.Tx
	session int64
}

func begin(t *testing.T, d dialects.Dialect) dialecttest.Tx {
	sd := d.(*sqlserver.Dialect)
	tx, err := sd.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &heldTx{d: sd, tx: tx}
	if err := tx.QueryRow(`SELECT CAST(@@SPID AS BIGINT)`).Scan(&h.session); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *heldTx) Exec(sql string, args ...any) error {
	q, err := render(h.d, sql)
	if err != nil {
		return err
	}
	_, err = h.tx.Exec(q, args...)
	return err
}

func (h *heldTx) Session() int64 { return h.session }
func (h *heldTx) Commit() error  { return h.tx.Commit() }
func (h *heldTx) Rollback()      { _ = h.tx.Rollback() }

// render renders a statement of the suite's SQL for SQL Server: the
// templates, and $n placeholders as @pn.
func render(d dialects.Dialect, sql string) (string, error) {
	q, err := dialects.Render("exec", sql, dialects.TemplateFuncs(d.Names(), sqlserver.Quoting))
	if err != nil {
		return "", err
	}
	return regexp.MustCompile(`\$(\d+)`).ReplaceAllString(q, "@p$1"), nil
}

// unreachable is a dialect whose server is a loopback port where nothing
// listens.
func unreachable(t *testing.T) dialects.Dialect {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	d, err := sqlserver.Open(context.Background(), sqlserver.Options{
		URL: fmt.Sprintf("sqlserver://sa:x@127.0.0.1:%d?database=app&dial+timeout=3", port), Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// A connection that cannot be opened is ErrUnreachable, and "Invalid object
// name" is ErrNoTable: tested without a server, through a real dial and the
// driver's own error type.
func TestErrorMapping(t *testing.T) {
	d := unreachable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.Ping(ctx); !errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("ping of a closed port: %v, want ErrUnreachable", err)
	}
	if _, err := d.OutboxStats(ctx); !errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("stats against a closed port: %v, want ErrUnreachable", err)
	}
	noTable := fmt.Errorf("query: %w", mssql.Error{Number: 208, Message: "Invalid object name 'dbo.outbox'."})
	if err := sqlserver.MapError(noTable); !errors.Is(err, dialects.ErrNoTable) || !strings.Contains(err.Error(), "dbo.outbox") {
		t.Errorf("error 208: %v, want ErrNoTable naming the object", err)
	}
	denied := mssql.Error{Number: 300, Message: "VIEW SERVER STATE permission was denied on object 'server', database 'master'."}
	if err := sqlserver.MapError(denied); !errors.Is(err, dialects.ErrNotPermitted) {
		t.Errorf("error 300: %v, want ErrNotPermitted", err)
	}
	for _, n := range []int32{18456, 4060} {
		refused := mssql.Error{Number: n, Message: "Login failed for user 'relay'."}
		if err := sqlserver.MapError(refused); !errors.Is(err, dialects.ErrLoginRefused) || !errors.Is(err, dialects.ErrUnreachable) || !strings.Contains(err.Error(), "Login failed for user 'relay'") {
			t.Errorf("error %d: %v, want ErrLoginRefused (and ErrUnreachable) with the server's reason", n, err)
		}
	}
	other := mssql.Error{Number: 2627, Message: "Violation of PRIMARY KEY constraint"}
	if err := sqlserver.MapError(other); errors.Is(err, dialects.ErrNoTable) || errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("a key violation was mapped: %v", err)
	}
}

// The probe reads the sequence before the transaction views, and both
// bounds come from the views: the order the settled-rows rule depends on.
func TestProbeReadsTheSequenceFirst(t *testing.T) {
	q, err := sqlserver.Queries(dialects.DefaultNames())
	if err != nil {
		t.Fatal(err)
	}
	p := q.OutboxProbe
	seq, next, xmin := strings.Index(p, "sys.sequences"), strings.Index(p, "DECLARE @next"), strings.Index(p, "MIN(st.transaction_id)")
	if seq < 0 || next < 0 || xmin < 0 || !(seq < next && next < xmin) {
		t.Fatalf("the probe must read the sequence, then the newest transaction id, then the oldest open one:\n%s", p)
	}
	if !strings.Contains(p, "st.session_id <> @@SPID") {
		t.Errorf("the probe counts its own transaction as a writer:\n%s", p)
	}
	// The oldest writer comes from the locks on the outbox table, read after
	// the sequence: a transaction that wrote other tables is not one.
	if locks := strings.Index(p, "sys.dm_tran_locks"); locks < seq || !strings.Contains(p[locks:], "OBJECT_ID(N'[outbox]')") ||
		!strings.Contains(p[locks:], "request_mode IN (N'IX', N'SIX', N'X')") {
		t.Errorf("the probe must read the oldest writer from the locks on the outbox table, after the sequence:\n%s", p)
	}
	if w := q.OutboxWriters; !strings.Contains(w, "sys.dm_tran_locks") || !strings.Contains(w, "OBJECT_ID(N'[outbox]')") {
		t.Errorf("the writers must be the transactions that hold a lock on the outbox table:\n%s", w)
	}
}

// The statements of the admin page and status bound their work on a large
// table: a TOP on the rows they read, the head rule for blocked keys, the
// due time (not created_at) for the oldest due row.
func TestOperatorStatementsAreBounded(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][]string{
		"OutboxPendingDue": {"SELECT TOP (1) w.at", "SELECT TOP (10000) o.[scheduled_at] AS at",
			"o.[status] = N'pending' AND o.[scheduled_at] <= @now",
			"WHERE COALESCE(w.k, N'') = N''", "e.[message_key] = w.k AND e.[seq_no] < w.seq",
			"e.[status] IN (N'pending', N'processing')",
			"[status] = N'pending' AND [scheduled_at] > @now", "DATEDIFF_BIG(millisecond"},
		"OutboxCountByTopicState": {"GROUP BY [topic], [status]"},
		"OutboxBlockedKeys": {"SELECT TOP (@p1) o.[message_key] AS k", "ORDER BY o.[scheduled_at]) AS h",
			"SELECT TOP (@p2) h.k", "SELECT TOP (@p3) 1 AS one", "h.attempt > 0",
			"b.[message_key] = h.k AND b.[seq_no] < h.seq", "b.[status] IN (N'pending', N'processing')"},
		"OutboxDeadGroups": {"SELECT TOP (@p1) [topic]", "CAST(COALESCE(LEFT([last_error], @p2), N'') AS NVARCHAR(4000))", "WHERE [status] = N'dead'",
			"ORDER BY [updated_at] DESC) AS d", "STRING_AGG(CAST(d.id AS NVARCHAR(MAX)), N',')", "GROUP BY d.topic, d.err"},
	}
	stmts := dialects.Statements(q)
	for name, wants := range checks {
		sql, ok := stmts[name]
		if !ok {
			t.Errorf("no statement %s", name)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(sql, w) {
				t.Errorf("%s lacks %q:\n%s", name, w, sql)
			}
		}
	}
	if strings.Contains(stmts["OutboxPendingDue"], "created_at") {
		t.Errorf("the oldest due row is measured from created_at, not from when it became due")
	}
	// A retention DELETE stays below SQL Server's lock escalation threshold
	// (about 5,000 locks on one table or index).
	if sqlserver.PurgeStatementRows >= 5000 {
		t.Errorf("PurgeStatementRows %d would let one DELETE escalate to a table lock", sqlserver.PurgeStatementRows)
	}
}

// OtherRelays counts sessions of the relay's own program name that another
// client process opened: never its own sessions (host and process id), and
// only user sessions.
func TestOtherRelaysLeavesOutThisProcess(t *testing.T) {
	q, err := sqlserver.Queries(dialects.DefaultNames())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sys.dm_exec_sessions", "is_user_process = 1", "program_name = APP_NAME()", "NOT (COALESCE(host_name, N'') = HOST_NAME() AND COALESCE(host_process_id, -1) = @p1)"} {
		if !strings.Contains(q.OtherRelays, want) {
			t.Errorf("OtherRelays lacks %q:\n%s", want, q.OtherRelays)
		}
	}
}

// A URL that go-mssqldb cannot parse is refused when the dialect opens,
// naming the setting, rather than at the first statement.
func TestOpenRefusesAMalformedURL(t *testing.T) {
	_, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: "sqlserver://user:pw@host:notaport?database=app", Names: dialects.DefaultNames()})
	if err == nil || !strings.Contains(err.Error(), "database.url is not a valid SQL Server URL") {
		t.Fatalf("err = %v, want one that names database.url", err)
	}
}

// withWorkstation sets the workstation id of a SQL Server URL (the URL form
// or the key=value form).
func withWorkstation(t *testing.T, dsn, name string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "sqlserver://") {
		return strings.TrimSuffix(dsn, ";") + ";workstation id=" + name
	}
	u, err := neturl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("workstation id", name)
	u.RawQuery = q.Encode()
	return u.String()
}
