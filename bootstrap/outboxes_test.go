package bootstrap

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const threeOutboxes = `
outbox:
  maxInFlight: 500
outboxes:
  orders:
    database: {url: "postgres://relay:pw-orders@db1:5432/app", schema: orders}
    outbox: {batchSize: 100}
  billing:
    database: {url: "postgres://relay@db1:5432/app", schema: billing, maxConnections: 4}
    routes: [{topicPattern: "bill.#", destination: hook}]
  ledger:
    database: {url: "postgres://relay@db2:5432/ledger", wakeups: probe}
destinations:
  hook: {type: http, url: "http://localhost:9/x"}
routes: [{topicPattern: "#", destination: hook}]
`

// The outboxes of a file: each its database, settings read over the top
// level's, routes of its own or the top level's.
func TestOutboxesInherit(t *testing.T) {
	l, err := Parse("q.yaml", []byte(threeOutboxes), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.OutboxNames(); !reflect.DeepEqual(got, []string{"billing", "ledger", "orders"}) {
		t.Fatalf("names: %v", got)
	}
	orders, err := l.ForOutbox("orders")
	if err != nil {
		t.Fatal(err)
	}
	if orders.Outbox.BatchSize != 100 || orders.Outbox.MaxInFlight != 500 || orders.Outbox.ClaimTimeoutMs != 30000 {
		t.Errorf("orders' outbox block is not read over the top level's: %+v", orders.Outbox)
	}
	if orders.Database.Schema != "orders" || orders.Database.OutboxTableName != "outbox" || orders.Database.MaxConnections != 10 || orders.OutboxName != "orders" {
		t.Errorf("orders' database block: %+v", orders.Database)
	}
	if r := orders.Compiled.Router.Match("bill.paid"); r == nil || r.Name != "#" {
		t.Errorf("orders should use the top-level routes, got %+v", r)
	}
	billing, _ := l.ForOutbox("billing")
	if billing.Outbox.BatchSize != 500 || billing.Outbox.MaxInFlight != 500 || billing.Database.MaxConnections != 4 {
		t.Errorf("billing: %+v %+v", billing.Outbox, billing.Database)
	}
	if billing.Compiled.Router.Match("order.created") != nil || billing.Compiled.Router.Match("bill.paid") == nil {
		t.Error("billing should use its own routes")
	}
	ledger, _ := l.ForOutbox("ledger")
	if ledger.Database.Wakeups != "probe" || ledger.Database.URL != "postgres://relay@db2:5432/ledger" {
		t.Errorf("ledger: %+v", ledger.Database)
	}
	if red := l.Secrets.Redact("postgres://relay:pw-orders@db1"); strings.Contains(red, "pw-orders") {
		t.Errorf("an outbox's password is not a secret: %s", red)
	}
	if _, err := l.ForOutbox("nope"); err == nil || !strings.Contains(err.Error(), "billing, ledger, orders") {
		t.Errorf("an unknown outbox: %v", err)
	}
	if _, err := l.SelectOutboxes("", true); err == nil || !strings.Contains(err.Error(), "pass --outbox NAME") {
		t.Errorf("one outbox of several needs --outbox: %v", err)
	}
	if all, err := l.SelectOutboxes("", false); err != nil || len(all) != 3 {
		t.Errorf("every outbox: %d %v", len(all), err)
	}
	// config check's output loads back the same.
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("q.yaml", out, env(nil))
	if err != nil {
		t.Fatalf("config check's output does not load back: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back.Outboxes["billing"].Routes, l.Outboxes["billing"].Routes) || back.Outboxes["orders"].Outbox.BatchSize != 100 {
		t.Errorf("config check's output loads back differently:\n%s", out)
	}
}

// A file with a top-level database is one outbox named default, as before.
func TestTopLevelDatabaseIsTheDefaultOutbox(t *testing.T) {
	l, err := Parse("q.yaml", []byte(minimal), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if l.ManyOutboxes() || !reflect.DeepEqual(l.OutboxNames(), []string{DefaultOutbox}) {
		t.Fatalf("names: %v", l.OutboxNames())
	}
	v, err := l.ForOutbox(DefaultOutbox)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Database, l.Database) || !reflect.DeepEqual(v.Outbox, l.Outbox) || v.Compiled != l.Compiled || v.OutboxName != DefaultOutbox {
		t.Error("the default outbox's view differs from the file")
	}
	one, err := l.SelectOutboxes("", true)
	if err != nil || len(one) != 1 {
		t.Errorf("a file of one outbox needs no --outbox: %v", err)
	}
	out, _ := l.Effective()
	if strings.Contains(string(out), "outboxes") {
		t.Errorf("config check prints outboxes for a file of one:\n%s", out)
	}
}

func TestBadOutboxes(t *testing.T) {
	ps := problems(t, minimal+`
outboxes:
  a: {database: {url: "postgres://localhost/app"}}
`)
	if !hasProblem(ps, "outboxes", "cannot be combined with a top-level database block", 0) {
		t.Errorf("database and outboxes: %v", ps)
	}
	ps = problems(t, `
outboxes:
  Bad Name:
    database: {url: "postgres://localhost/app"}
  a:
    database: {url: "postgres://localhost/app"}
  b:
    database: {url: "postgres://localhost/app", schema: b, wakeups: sometimes}
    outbox: {backoff: {initialMs: 5000, maxMs: 1000}}
  c: {}
  d:
    database: {url: "postgres://localhost/app", schema: d}
    routes: [{topicPattern: "#", destination: nope}]
  e:
    database: {schema: e}
  b:
    database: {url: "postgres://localhost/app", schema: b2}
engine: {maxConnections: 5}
inbox:
  sources:
    hooks: {type: http, topic: t}
destinations:
  hook: {type: http, url: "http://localhost:9/x"}
`)
	for _, want := range []struct{ key, reason string }{
		{"outboxes.Bad Name", "use lowercase letters, digits, '_' and '-'"},
		{"outboxes.a.database", "names the same table as outboxes.Bad Name"},
		{"outboxes.a.routes", "no route is configured for this outbox"},
		{"outboxes.b.database.wakeups", "not a kind of wake-up"},
		{"outboxes.b.outbox.backoff.maxMs", "is below outboxes.b.outbox.backoff.initialMs"},
		{"outboxes.b", "is given twice"},
		{"outboxes.c.database", "is required"},
		{"outboxes.d.routes[0].destination", `"nope" is not a defined destination`},
		{"outboxes.e.database.url", "is required: the URL of the database that holds this outbox's table"},
		{"engine.maxConnections", "fewer than 2 each"},
		{"inbox.outbox", "is required with inbox sources and several outboxes"},
	} {
		if !hasProblem(ps, want.key, want.reason, 0) {
			t.Errorf("no problem %s: %s; got %v", want.key, want.reason, ps)
		}
	}
	ps = problems(t, `
outboxes: {}
destinations:
  hook: {type: http, url: "http://localhost:9/x"}
routes: [{topicPattern: "#", destination: hook}]
`)
	if !hasProblem(ps, "outboxes", "is empty", 0) {
		t.Errorf("empty outboxes: %v", ps)
	}
	ps = problems(t, threeOutboxes+`
engine: {maxConnections: 3}
inbox: {outbox: nope}
`)
	if !hasProblem(ps, "engine.maxConnections", "3 is below the 4 connections", 0) || !hasProblem(ps, "inbox.outbox", `"nope" is not an outbox of this file`, 0) {
		t.Errorf("pools and inbox.outbox: %v", ps)
	}
}

// engine.maxConnections shares what the outboxes' own pools leave.
func TestPoolShares(t *testing.T) {
	l, err := Parse("q.yaml", []byte(threeOutboxes+"engine: {maxConnections: 14}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"billing": 4, "orders": 5, "ledger": 5} {
		v, _ := l.ForOutbox(name)
		if v.Database.MaxConnections != want {
			t.Errorf("%s: pool %d, want %d", name, v.Database.MaxConnections, want)
		}
	}
}

// QUEUEBOX_DATABASE_URL names one database: with outboxes it is not used,
// and says so.
func TestDatabaseURLVariableWithOutboxes(t *testing.T) {
	l, err := Parse("q.yaml", []byte(threeOutboxes), env(map[string]string{"QUEUEBOX_DATABASE_URL": "postgres://other/db"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || l.Warnings[0].Key != "QUEUEBOX_DATABASE_URL" {
		t.Errorf("warnings: %v", l.Warnings)
	}
	if v, _ := l.ForOutbox("orders"); strings.Contains(v.Database.URL, "other") {
		t.Error("the variable replaced an outbox's url")
	}
	var ce *Error
	if _, err := Parse("q.yaml", []byte(threeOutboxes), env(nil)); errors.As(err, &ce) {
		t.Fatal(err)
	}
}

// The tools leave a variable that is not set empty outside the database
// blocks; an outbox's database block needs its variables as the top
// level's does.
func TestToolsNeedEveryOutboxsDatabaseVariables(t *testing.T) {
	cfg := strings.Replace(threeOutboxes, `"postgres://relay@db2:5432/ledger"`, `"postgres://relay:${LEDGER_PW}@db2:5432/ledger"`, 1)
	_, err := ParseForTools("q.yaml", []byte(cfg), env(nil))
	var ce *Error
	if !errors.As(err, &ce) || !hasProblem(ce.Problems, "outboxes.ledger.database.url", "LEDGER_PW is not set", 0) {
		t.Errorf("an unset variable of an outbox's url: %v", err)
	}
	if !databaseKey("outboxes.a.database.url") || databaseKey("outboxes.a.outbox.batchSize") || !databaseKey("database.url") || databaseKey("destinations.database.url") {
		t.Error("databaseKey")
	}
}

// An outbox on SQL Server is checked as a top-level SQL Server database is.
func TestSQLServerOutbox(t *testing.T) {
	ps := problems(t, `
outboxes:
  pg:
    database: {url: "postgres://db1/app"}
  ms:
    database: {dialect: sqlserver, url: "sqlserver://relay@db2:1433?database=app", wakeups: logical}
  ms2:
    database: {dialect: sqlserver, url: "postgres://db2/app", schema: other}
destinations:
  hook: {type: http, url: "http://localhost:9/x"}
routes: [{topicPattern: "#", destination: hook}]
`)
	if !hasProblem(ps, "outboxes.ms.database.wakeups", "SQL Server does not have", 0) || !hasProblem(ps, "outboxes.ms2.database.url", "does not fit outboxes.ms2.database.dialect sqlserver", 0) || len(ps) != 2 {
		t.Errorf("SQL Server outboxes: %v", ps)
	}
	l, err := Parse("q.yaml", []byte(`
outboxes:
  pg:
    database: {url: "postgres://db1/app"}
  ms:
    database: {dialect: sqlserver, url: "sqlserver://relay@db2:1433?database=app", schema: dbo}
destinations:
  hook: {type: http, url: "http://localhost:9/x"}
routes: [{topicPattern: "#", destination: hook}]
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := l.ForOutbox("ms"); v.Database.Dialect != "sqlserver" || v.Names().Schema != "dbo" {
		t.Errorf("ms: %+v", v.Database)
	}
}
