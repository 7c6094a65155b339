// Package testdb gives each test an isolated schema in a real PostgreSQL.
//
// The server is $QUEUEBOX_TEST_DATABASE_URL when set (scripts/test.sh starts
// one throwaway cluster for the whole run and sets it); otherwise the test
// binary starts a throwaway cluster of its own in Main. Connections made
// through URL have an empty-ish search_path (pg_catalog only), so a statement
// that forgets to qualify a name fails loudly.
package testdb

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/migrations"
)

var (
	mu      sync.Mutex
	cluster *pgcluster.Cluster
	baseURL string
)

// Main runs the tests of a package, stops a cluster it started, and
// returns m's code. A TestMain that only calls Main may return: the test
// binary then exits with the code of testing.M.Run. One whose m changes
// that code passes Main's result to os.Exit.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	mu.Lock()
	if cluster != nil {
		cluster.Stop()
	}
	mu.Unlock()
	return code
}

// ServerURL returns the URL of the test server's default database, starting
// a cluster if needed.
func ServerURL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if baseURL != "" {
		return baseURL
	}
	if u := os.Getenv("QUEUEBOX_TEST_DATABASE_URL"); u != "" {
		baseURL = u
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: os.Getenv("QUEUEBOX_TEST_DURABLE") != "1", Prefix: "queuebox-test-"})
	if err != nil {
		t.Fatalf("start a throwaway PostgreSQL: %v", err)
	}
	cluster, baseURL = c, c.URL()
	return baseURL
}

// Schema creates a fresh schema, dropped when the test ends, and returns its
// name and a URL whose search_path is pg_catalog only.
func Schema(t testing.TB) (schema, dbURL string) {
	t.Helper()
	base := ServerURL(t)
	schema = "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %q`, schema)); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, fmt.Sprintf(`DROP SCHEMA %q CASCADE`, schema))
	})
	return schema, WithParam(base, "search_path", "pg_catalog")
}

// WithParam adds a query parameter to a connection URL.
func WithParam(dbURL, key, value string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Database creates a fresh database (for tests that need a whole one, such
// as runs of the real binary), dropped when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	base := ServerURL(t)
	name := "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %q`, name)); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE %q WITH (FORCE)`, name))
	})
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

// ApplicationName names the sessions of Open's dialects: a name of this
// test process's own, so that the engines on them count each other as
// relays (they are replicas) but not the engines of other test processes
// on these dialects. Engines on dialects opened otherwise (bootstrap's,
// with the default name) do count each other across packages; a test
// that depends on the count gives its dialects a name of its own.
var ApplicationName = fmt.Sprintf("queuebox-test-%d", os.Getpid())

// Open opens QueueBox's PostgreSQL dialect, with at most maxConns
// connections (0: the default), on a schema of the test's own (Schema) that
// holds nothing yet; it is closed when the test ends.
func Open(t testing.TB, maxConns int) *postgres.Dialect {
	t.Helper()
	schema, url := Schema(t)
	names := dialects.DefaultNames()
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: url, Names: names, MaxConnections: maxConns, ApplicationName: ApplicationName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// Migrated is Open on a schema that the migrations have made.
func Migrated(t testing.TB, maxConns int) *postgres.Dialect {
	t.Helper()
	d := Open(t, maxConns)
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return d
}

// RuntimeRole creates a role that may log in, use schema and read and
// write its tables as they are now, and nothing more (as a relay's role in
// production: no CREATE, no REPLICATION); it is dropped when the test
// ends. It returns the role's name and dbURL with the role as its user.
func RuntimeRole(t testing.TB, dbURL, schema string) (role, roleURL string) {
	t.Helper()
	role = "r_" + schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, dbURL); err == nil {
			_, _ = conn.Exec(ctx, `DROP OWNED BY `+role+`; DROP ROLE `+role)
			conn.Close(ctx)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return role, u.String()
}
