package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
)

type runResult struct{ err error }

// countedPings counts the pings Run makes; every call goes to the real
// database. each, when set, hears every ping's number.
type countedPings struct {
	dialects.Dialect
	n    *atomic.Int64
	each func(n int64)
}

func (c countedPings) Ping(ctx context.Context) error {
	n := c.n.Add(1)
	if c.each != nil {
		c.each(n)
	}
	return c.Dialect.Ping(ctx)
}

// runConfig loads the configuration of a relay on dbURL that delivers every
// topic to recvURL, and opens its database until the test ends.
func runConfig(t *testing.T, dbURL, recvURL string) (*Loaded, dialects.Dialect) {
	t.Helper()
	cfg := Defaults()
	cfg.Database.URL = dbURL
	cfg.Outbox.PollIntervalMs = 50
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Destinations = map[string]*DestinationConfig{"hook": {Type: "http", URL: recvURL + "/events/{{ topic }}"}}
	cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "hook"}}
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, openDialect(t, l)
}

// startRun runs Run against dbURL in the background with signals the test
// sends, logging to the returned buffer.
func startRun(t *testing.T, dbURL, recvURL string) (sigs chan os.Signal, logs *testlog.Buffer, started chan struct{}, done chan runResult, pings *atomic.Int64) {
	t.Helper()
	l, d := runConfig(t, dbURL, recvURL)
	logs = &testlog.Buffer{}
	sigs, started, done, pings = make(chan os.Signal, 2), make(chan struct{}), make(chan runResult, 1), &atomic.Int64{}
	stop := watchSignals(sigs)
	t.Cleanup(stop.Release)
	go func() {
		err := Run(stop.Stop, l, countedPings{Dialect: d, n: pings}, logs.Logger(), RunOptions{Migrate: true, Abort: stop.Abort, Started: func(*actors.Engine) { close(started) }})
		done <- runResult{err}
	}()
	return sigs, logs, started, done, pings
}

// `run --migrate` started while the database is down waits for it, logs
// that once, migrates when it comes up, and then delivers.
func TestRunMigratesWhenTheDatabaseComesUpLater(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-down-"})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	cluster.Kill() // down before the relay starts; the folder stays for Restart
	recv := testrecv.New(t, nil)
	sigs, logs, started, done, pings := startRun(t, cluster.URL(), recv.URL)

	logs.WaitFor(t, "database unreachable at start; retrying")
	testkit.Eventually(t, "a few retries", 0, testkit.True(func() bool { return pings.Load() >= 4 }))
	select {
	case <-started:
		t.Fatal("the engine started while the database was down")
	case r := <-done:
		t.Fatalf("Run returned while the database was down: %v\n%s", r.err, logs.String())
	default:
	}
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	// The tables appear, and rows inserted now are delivered.
	d, err := postgres.Open(ctx, postgres.Options{URL: cluster.URL(), Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	testkit.Eventually(t, "the migrations", time.Minute, func() error {
		current, err := migrations.Current(ctx, d)
		if err == nil && !current {
			err = errors.New("the schema is not current")
		}
		return err
	})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatalf("the engine did not start:\n%s", logs.String())
	}
	rows := testkit.Rows(20, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("k%d", i%3)), testkit.Payload(fmt.Sprintf(`{"n":%d}`, i))}
	})
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, len(rows), time.Minute)
	recv.CheckOrder(t)

	sigs <- syscall.SIGTERM
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Run after SIGTERM: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	out := logs.String()
	for _, want := range []string{"database reachable; starting", "migrations applied", "engine started"} {
		if !strings.Contains(out, want) {
			t.Errorf("the logs lack %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "database unreachable at start"); n != 1 {
		t.Errorf("the unreachable line was logged %d times:\n%s", n, out)
	}
}

// SIGTERM while Run waits for the database ends it with nil (exit 0),
// without starting anything.
func TestRunStopsCleanlyWhileWaitingForTheDatabase(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: a cluster started and stopped frees one.
	cluster, err := pgcluster.Start(context.Background(), pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-down-"})
	if err != nil {
		t.Fatal(err)
	}
	dbURL := cluster.URL()
	cluster.Stop()
	sigs, logs, started, done, _ := startRun(t, dbURL, "http://127.0.0.1:1")
	logs.WaitFor(t, "database unreachable at start; retrying")
	sigs <- syscall.SIGTERM
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Run: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return after SIGTERM:\n%s", logs.String())
	}
	select {
	case <-started:
		t.Fatal("the engine started")
	default:
	}
	if !strings.Contains(logs.String(), "signal received while waiting for the database; exiting") {
		t.Errorf("logs:\n%s", logs.String())
	}
}

// Run without --migrate on a schema that holds no QueueBox table says
// that nothing was applied there, and names the schema and table to check
// (a misspelt database.schema looks the same as a first start); once
// migrated, the schema is current.
func TestRunNamesTheSchemaThatHoldsNoTables(t *testing.T) {
	ctx := context.Background()
	d := testdb.Open(t, 0)
	schema := d.Names().Schema
	log := slog.New(slog.DiscardHandler)
	err := checkSchema(ctx, d, log, false)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 1 {
		t.Fatalf("err = %v, want an exit code of 1", err)
	}
	for _, want := range []string{"no QueueBox migration has been applied to the table outbox in " + schema, "queuebox migrate up", "check database.schema and database.outboxTableName"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(ctx, d, log, false); err != nil {
		t.Fatalf("a migrated schema: %v", err)
	}
}
