// Package migrations holds the versioned schema of QueueBox for each dialect
// and the runner that applies it.
//
// Each file is V<version>__<name>.sql, a template rendered for the configured
// table and column names (see dialects.TemplateFuncs). On SQL Server a line
// holding only GO separates batches. Applied versions are recorded in the
// table <outbox>_schema_history with the checksum of the template; the
// runner holds a database lock for its whole run, so two processes migrating
// at once apply every version exactly once.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

//go:embed postgresql/*.sql sqlserver/*.sql
var files embed.FS

// Migration is one versioned template.
type Migration struct {
	Version  int
	Name     string
	Template string
	Checksum string
}

var fileRE = regexp.MustCompile(`^V(\d+)__([a-z0-9_]+)\.sql$`)

// Load returns the migrations of a dialect ("postgresql" or "sqlserver") in
// version order.
func Load(dialect string) ([]Migration, error) {
	entries, err := fs.ReadDir(files, dialect)
	if err != nil {
		return nil, fmt.Errorf("no migrations for dialect %q", dialect)
	}
	var out []Migration
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s/%s is not named V<version>__<name>.sql", dialect, e.Name())
		}
		data, err := fs.ReadFile(files, dialect+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		v, _ := strconv.Atoi(m[1])
		sum := sha256.Sum256(data)
		out = append(out, Migration{Version: v, Name: m[2], Template: string(data), Checksum: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two %s migrations have version %d", dialect, out[i].Version)
		}
	}
	return out, nil
}

// Latest is the newest version of a dialect's migrations.
func Latest(dialect string) int {
	ms, err := Load(dialect)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

var goLine = regexp.MustCompile(`(?mi)^\s*GO\s*$`)

// Render renders a migration of a dialect ("postgresql" or "sqlserver") with
// its quoting for names, and splits it into batches.
func Render(dialect string, q dialects.Quoting, m Migration, names dialects.Names) ([]string, error) {
	sql, err := dialects.Render(fmt.Sprintf("V%d__%s", m.Version, m.Name), m.Template, dialects.TemplateFuncs(names, q))
	if err != nil {
		return nil, err
	}
	if dialect != "sqlserver" {
		return []string{sql}, nil
	}
	var batches []string
	for _, b := range goLine.Split(sql, -1) {
		if strings.TrimSpace(stripComments(b)) != "" {
			batches = append(batches, b)
		}
	}
	return batches, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Status is one migration and whether it is applied.
type Status struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time
	// Changed is true when the applied migration's checksum differs from the
	// bundled file's.
	Changed bool
}

// Up applies every pending migration.
func Up(ctx context.Context, d dialects.Migrator) ([]Status, error) { return UpTo(ctx, d, 1<<30) }

// UpTo applies pending migrations up to and including target, and returns
// those it applied.
func UpTo(ctx context.Context, d dialects.Migrator, target int) ([]Status, error) {
	ms, err := Load(d.Name())
	if err != nil {
		return nil, err
	}
	s, err := d.MigrationSession(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	applied, err := s.Applied(ctx)
	if err != nil {
		return nil, err
	}
	done := map[int]bool{}
	for _, a := range applied {
		done[a.Version] = true
	}
	var out []Status
	for _, m := range ms {
		if m.Version > target || done[m.Version] {
			continue
		}
		batches, err := Render(d.Name(), d.Quoting(), m, d.Names())
		if err != nil {
			return out, err
		}
		if err := s.Apply(ctx, dialects.ApplyParams{Version: m.Version, Name: m.Name, Checksum: m.Checksum, Batches: batches}); err != nil {
			return out, fmt.Errorf("migration V%d (%s) failed, nothing of it was applied: %w", m.Version, m.Name, err)
		}
		out = append(out, Status{Version: m.Version, Name: m.Name, Applied: true, AppliedAt: time.Now()})
	}
	return out, nil
}

// StatusOf lists every bundled migration and whether it is applied. It only
// reads: no lock, nothing created, so a least-privilege user can run it.
func StatusOf(ctx context.Context, d dialects.Migrator) ([]Status, error) {
	ms, err := Load(d.Name())
	if err != nil {
		return nil, err
	}
	applied, err := d.MigrationHistory(ctx)
	if err != nil {
		return nil, err
	}
	byVersion := map[int]dialects.AppliedMigration{}
	for _, a := range applied {
		byVersion[a.Version] = a
	}
	out := make([]Status, 0, len(ms))
	for _, m := range ms {
		st := Status{Version: m.Version, Name: m.Name}
		if a, ok := byVersion[m.Version]; ok {
			st.Applied, st.AppliedAt, st.Changed = true, a.AppliedAt, a.Checksum != m.Checksum
		}
		out = append(out, st)
	}
	return out, nil
}

// Current reports whether every bundled migration is applied.
func Current(ctx context.Context, d dialects.Migrator) (bool, error) {
	st, err := StatusOf(ctx, d)
	if err != nil {
		return false, err
	}
	for _, s := range st {
		if !s.Applied {
			return false, nil
		}
	}
	return true, nil
}
