package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/queuebox/queuebox/internal/pgcluster"
)

// workload is an application's insert pattern, as a pgbench script. TABLE
// stands for the schema-qualified outbox table; each row carries the
// scenario's payload.
type workload struct {
	name, script string
	rowsPerTx    int
}

var workloads = []workload{
	{"single-row, 1,000 keys", `\set k random(1, 1000)
INSERT INTO TABLE (topic, key, payload) VALUES ('order.created', 'k' || :k, PAYLOAD);
`, 1},
	{"2 rows/tx, 20 keys, random order", `\set a random(1, 20)
\set b random(1, 20)
BEGIN;
INSERT INTO TABLE (topic, key, payload) VALUES ('order.created', 'k' || :a, PAYLOAD);
INSERT INTO TABLE (topic, key, payload) VALUES ('order.paid', 'k' || :b, PAYLOAD);
END;
`, 2},
	{"100 rows/statement, distinct keys", `INSERT INTO TABLE (topic, key, payload) SELECT 'order.created', md5(random()::text), PAYLOAD FROM generate_series(1, 100);
`, 100},
}

// producerClients is the number of application connections.
const producerClients = 8

// runProducer measures what an application's inserts pay for QueueBox: each
// workload runs with pgbench against a table the migrations made, and
// against the same table with QueueBox's trigger disabled (a plain table).
// The two tables take turns in rounds, in the order plain, with, with,
// plain (and, from 20 s on, with, plain, plain, with after that): a
// commit's cost on a durable cluster drifts by 10% and more from one
// ten-second stretch to the next (checkpoints, the disk's cache), and this
// order gives both sides the same mean position in time, so that a steady
// drift falls on both evenly instead of on whichever ran second.
func runProducer(ctx context.Context, e *env) ([]Result, error) {
	pgbench, err := pgbenchPath()
	if err != nil {
		return nil, err
	}
	dir, err := ownedTemp("queuebox-bench-pgbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rounds := 1
	switch {
	case e.o.Seconds >= 20:
		rounds = 4
	case e.o.Seconds >= 2:
		rounds = 2
	}
	roundSeconds := max(1, e.o.Seconds/rounds)
	order := []int{0, 1, 1, 0, 1, 0, 0, 1}[:2*rounds] // 0 plain, 1 with QueueBox
	var out []Result
	for _, w := range workloads {
		var files [2]string
		for i, plain := range []bool{true, false} {
			d, h, err := e.fresh(ctx, "producer")
			if err != nil {
				return nil, err
			}
			if plain {
				if _, err := d.Pool().Exec(ctx, h.PlainTable); err != nil {
					return nil, err
				}
			}
			table := fmt.Sprintf(`%q.%q`, d.Names().Schema, d.Names().Outbox)
			script := strings.ReplaceAll(strings.ReplaceAll(w.script, "TABLE", table), "PAYLOAD", "'"+string(e.payload)+"'::jsonb")
			files[i] = filepath.Join(dir, fmt.Sprintf("w%d.sql", i))
			if err := os.WriteFile(files[i], []byte(script), 0o644); err != nil {
				return nil, err
			}
		}
		var txs [2]float64
		var failed [2]int64
		for _, i := range order {
			t, f, err := pgbenchRun(ctx, pgbench, e.url, files[i], roundSeconds)
			if err != nil {
				return nil, err
			}
			txs[i] += t * float64(roundSeconds)
			failed[i] += f
			e.progress.add(int(t * float64(roundSeconds) * float64(w.rowsPerTx)))
		}
		for i, plain := range []bool{true, false} {
			seconds := float64(rounds * roundSeconds)
			t := txs[i] / seconds
			r := Result{Scenario: "producer", Variant: w.name, Keys: keysOf(w), Replicas: 0, Failed: failed[i], Seconds: seconds}
			if plain {
				r.Variant += ", plain table"
			} else {
				r.Variant += ", with QueueBox"
				if txs[0] > 0 {
					r.Ratio = ptr(txs[1] / txs[0])
				}
			}
			r.RowsPerSec = t * float64(w.rowsPerTx)
			r.Rows = int(r.RowsPerSec * seconds)
			r.Note = fmt.Sprintf("%.0f transactions/s, %d clients, %d rounds of %d s taking turns", t, producerClients, rounds, roundSeconds)
			out = append(out, r)
		}
	}
	return out, nil
}

// keysOf is the keys a workload writes over; 100 rows per statement write
// distinct keys, as many as rows (0 in the table: not a fixed set).
func keysOf(w workload) int {
	switch w.rowsPerTx {
	case 1:
		return 1000
	case 2:
		return 20
	}
	return 0
}

var (
	tpsRE    = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	failedRE = regexp.MustCompile(`number of failed transactions: ([0-9]+)`)
)

// pgbenchPath finds pgbench beside the server's binaries; Run checks it
// before any scenario when producer is selected.
func pgbenchPath() (string, error) {
	bin, err := pgcluster.BinDir()
	if err != nil {
		return "", err
	}
	pgbench := filepath.Join(bin, "pgbench")
	if _, err := os.Stat(pgbench); err != nil {
		return "", fmt.Errorf("the producer scenario needs pgbench, which is not in %s: it comes with the PostgreSQL server package (or leave producer out of --scenarios)", bin)
	}
	return pgbench, nil
}

// pgbenchRun runs one script and returns its transactions per second and
// failed transactions (deadlocks and serialisation failures are counted,
// not retried).
func pgbenchRun(ctx context.Context, pgbench, url, file string, seconds int) (float64, int64, error) {
	// The password goes in the environment, not on a command line that
	// every user of the machine can read.
	url, password := withoutPassword(url)
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", strconv.Itoa(producerClients), "-j", "2", "-T", strconv.Itoa(seconds), "-f", file, url)
	if password != "" {
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
	}
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("pgbench: %v\n%s", err, outb.String())
	}
	m := tpsRE.FindStringSubmatch(outb.String())
	if m == nil {
		return 0, 0, fmt.Errorf("pgbench printed no tps:\n%s", outb.String())
	}
	t, _ := strconv.ParseFloat(m[1], 64)
	var failed int64
	if f := failedRE.FindStringSubmatch(outb.String()); f != nil {
		failed, _ = strconv.ParseInt(f[1], 10, 64)
	}
	return t, failed, nil
}

// withoutPassword takes the password out of a postgres:// URL; other forms
// are returned as they are.
func withoutPassword(raw string) (string, string) {
	u, err := neturl.Parse(raw)
	if err != nil || u.User == nil {
		return raw, ""
	}
	password, ok := u.User.Password()
	if !ok {
		return raw, ""
	}
	u.User = neturl.User(u.User.Username())
	return u.String(), password
}
