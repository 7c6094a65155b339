package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// fault is one kind of fault the suite injects: inject starts it and
// returns what ends it, hold is how long it lasts.
type fault struct {
	name string
	// full: only in the full suite (make test-faults).
	full bool
	// dups: the fault may cause duplicates (see faultRecord.Dups).
	dups bool
	hold time.Duration
	// inject starts the fault on w and returns the function that ends it.
	inject func(w *world, f *faultRecord) (heal func())
}

// faults is the schedule, in order. Replicas start as r1, r2 and r3; one
// started in place of a killed or stopped one gets the next number.
var faults = []fault{
	{name: "none (baseline)", hold: 2 * time.Second, inject: func(*world, *faultRecord) func() { return func() {} }},
	{name: "SIGKILL of a replica mid-delivery", dups: true, inject: func(w *world, f *faultRecord) func() {
		r := w.replica("r1")
		w.waitInFlight("r1")
		r.signal(w.t, syscall.SIGKILL)
		<-r.done
		return func() { w.start(w.nextName()) }
	}},
	{name: "SIGSTOP of a replica for twice its lease, then SIGCONT", dups: true, inject: func(w *world, f *faultRecord) func() {
		r := w.replica("r2")
		w.waitInFlight("r2")
		f.Stopped = "r2"
		r.signal(w.t, syscall.SIGSTOP)
		time.Sleep(2 * time.Duration(w.s.leaseMs) * time.Millisecond) // the fault's length

		return func() {
			r.signal(w.t, syscall.SIGCONT)
			f.Healed = time.Now() // the stop's end, precisely: stale sends are judged from here
		}
	}},
	{name: "PostgreSQL killed and restarted", dups: true, hold: time.Second, inject: func(w *world, f *faultRecord) func() {
		// The producers wait: an application cannot commit while its
		// database is down, and that is not the relay's doing.
		w.prod.pause()
		w.pg.Kill()
		return func() {
			if err := w.pg.Restart(w.ctx); err != nil {
				w.t.Fatal(err)
			}
			w.prod.resume()
		}
	}},
	{name: "replicas' connections terminated by the server (pg_terminate_backend)", dups: true, inject: func(w *world, f *faultRecord) func() {
		n := 0
		for range 3 {
			n += w.terminate()
			time.Sleep(400 * time.Millisecond) // the fault's rhythm
		}
		f.Note = fmt.Sprintf("%d sessions terminated", n)
		return func() {}
	}},
	{name: "database latency 150 ms ± 50 each way", full: true, dups: true, hold: 5 * time.Second, inject: func(w *world, f *faultRecord) func() {
		up := w.toxic(w.dbProx, "lat-up", "latency", "upstream", map[string]any{"latency": 150, "jitter": 50})
		down := w.toxic(w.dbProx, "lat-down", "latency", "downstream", map[string]any{"latency": 150, "jitter": 50})
		return func() { up(); down() }
	}},
	{name: "database connections reset", dups: true, hold: 2 * time.Second, inject: func(w *world, f *faultRecord) func() {
		return w.toxic(w.dbProx, "reset", "reset_peer", "upstream", map[string]any{"timeout": 0})
	}},
	{name: "database black hole (no bytes pass) for 4 s", full: true, dups: true, hold: 4 * time.Second, inject: func(w *world, f *faultRecord) func() {
		return w.toxic(w.dbProx, "hole", "timeout", "upstream", map[string]any{"timeout": 0})
	}},
	{name: "destination answers 503", hold: 3 * time.Second, inject: func(w *world, f *faultRecord) func() {
		w.recv.setMode(answer503)
		return func() { w.recv.setMode(answerOK) }
	}},
	{name: "destination unreachable (connection refused)", full: true, dups: true, hold: 3 * time.Second, inject: func(w *world, f *faultRecord) func() {
		w.hProx.Stop()
		return func() {
			if err := w.hProx.Start(); err != nil {
				w.t.Fatal(err)
			}
		}
	}},
	{name: "destination slower than its timeout", dups: true, hold: 3 * time.Second, inject: func(w *world, f *faultRecord) func() {
		w.recv.setMode(answerSlow)
		return func() { w.recv.setMode(answerOK) }
	}},
	{name: "destination latency 200 ms each way", full: true, dups: true, hold: 4 * time.Second, inject: func(w *world, f *faultRecord) func() {
		up := w.toxic(w.hProx, "lat-up", "latency", "upstream", map[string]any{"latency": 200})
		down := w.toxic(w.hProx, "lat-down", "latency", "downstream", map[string]any{"latency": 200})
		return func() { up(); down() }
	}},
	{name: "destination connections reset", dups: true, hold: 2 * time.Second, inject: func(w *world, f *faultRecord) func() {
		return w.toxic(w.hProx, "reset", "reset_peer", "downstream", map[string]any{"timeout": 0})
	}},
	{name: "RabbitMQ restarted", full: true, dups: true, inject: func(w *world, f *faultRecord) func() {
		if w.rabbit == nil {
			return nil
		}
		w.rabbit.Stop(w.t)
		return func() { w.rabbit.Start(w.t) }
	}},
	{name: "Kafka restarted", full: true, dups: true, hold: 2 * time.Second, inject: func(w *world, f *faultRecord) func() {
		if w.kafka == nil {
			return nil
		}
		w.kafka.Stop(w.t)
		return func() { w.kafka.Start(w.t) }
	}},
	{name: "NATS restarted", full: true, dups: true, hold: 2 * time.Second, inject: func(w *world, f *faultRecord) func() {
		if w.nats == nil {
			return nil
		}
		w.nats.Stop(w.t)
		return func() { w.nats.Start(w.t) }
	}},
	{name: "SIGTERM of a replica under load (drain)", inject: func(w *world, f *faultRecord) func() {
		r := w.replica("r3")
		w.waitInFlight("r3")
		r.signal(w.t, syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			w.t.Fatalf("r3 did not exit within 30 s of SIGTERM:\n%s", tail(r.logs.String(), 3000))
		}
		if r.err != nil || !strings.Contains(r.logs.String(), `"msg":"stopped"`) {
			w.t.Errorf("r3 after SIGTERM: exit %v; its log:\n%s", r.err, tail(r.logs.String(), 3000))
		}
		return func() { w.start(w.nextName()) }
	}},
}

// waitInFlight waits (a little) until the replica has a request at the
// receiver that is not answered yet, so that a fault lands mid-delivery.
func (w *world) waitInFlight(name string) { w.ledger.waitInFlightFrom(name, 3*time.Second) }

// TestFaults runs the suite: reduced by default, all of it with
// QUEUEBOX_FAULTS=full.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas of the binary against faults")
	}
	s := settings{replicas: 3, keys: 150, rate: 80, producers: 4, minRows: 2000, leaseMs: 3000, timeoutMs: 1000,
		slow: 2500 * time.Millisecond, settleLimit: 90 * time.Second}
	if os.Getenv("QUEUEBOX_FAULTS") == "full" {
		s.full, s.keys, s.rate, s.minRows = true, 400, 220, 20000
		s.brokers = []string{"rabbit", "kafka", "nats"}
	}
	w := newWorld(t, s)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	consumed := w.consume(consumeCtx)
	defer func() { stopConsuming(); consumed() }()
	for i := range s.replicas {
		w.start(fmt.Sprintf("r%d", i+1))
	}
	w.prod.start()
	w.prod.startInbox(2, 40, s.rate/10)
	defer w.prod.halt()
	time.Sleep(time.Second) // load before the first fault: time must pass

	for _, f := range faults {
		if f.full && !s.full {
			continue
		}
		time.Sleep(time.Second) // load before the fault
		rec := &faultRecord{Name: f.name, Dups: f.dups, Start: time.Now()}
		w.faults = append(w.faults, rec)
		heal := f.inject(w, rec)
		if heal == nil { // the destination is not in this run
			w.faults = w.faults[:len(w.faults)-1]
			continue
		}
		time.Sleep(f.hold) // the fault's length
		heal()
		if rec.Healed.IsZero() {
			rec.Healed = time.Now()
		}
		at := w.dbNow()
		rec.Recovered = w.settle(at, rec.Healed, f.name)
		if rec.Stopped != "" {
			// The continued replica finds its claims lost as its writes
			// come back matching nothing; give it a moment.
			_ = testkit.Poll(5*time.Second, func() error { // what it found is reported, not asserted here
				rec.LostClaims, rec.LostClaimsKnown = w.replica(rec.Stopped).metric(`queuebox_lost_claims_total{outbox="default"}`)
				if rec.LostClaims == 0 {
					return errors.New("no lost claim yet")
				}
				return nil
			})
		}
		t.Logf("%-70s recovered in %s %s", f.name, rec.Recovered.Round(10*time.Millisecond), rec.Note)
	}

	w.conclude(stopConsuming, consumed, os.Getenv("QUEUEBOX_FAULTS_REPORT"))
}

// conclude ends a run and gives its verdict: the producers go on until
// enough rows are written, then stop; every row is delivered; every live
// replica drains on SIGTERM and exits 0; what reached the brokers is read;
// and the ledger is judged, failing t on any broken promise. The table of
// the run is logged, and written to reportFile when one is named.
func (w *world) conclude(stopConsuming, consumed func(), reportFile string) {
	t, s := w.t, w.s
	// The producers go on until enough rows are written, then stop.
	if err := testkit.Poll(10*time.Minute, func() error {
		if n := w.prod.count(); n < s.minRows {
			return fmt.Errorf("%d rows written, want %d", n, s.minRows)
		}
		return nil
	}); err != nil {
		t.Logf("the producers stop early: %v", err)
	}
	w.prod.halt()
	w.settle(w.dbNow(), time.Now(), "the end of the run")

	// Every replica drains on SIGTERM and exits 0.
	for _, r := range w.all() {
		select {
		case <-r.done:
			continue // killed or stopped by a fault
		default:
		}
		r.signal(t, syscall.SIGTERM)
		select {
		case <-r.done:
			if r.err != nil {
				t.Errorf("%s exited with %v after SIGTERM:\n%s", r.name, r.err, tail(r.logs.String(), 3000))
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not exit within 30 s of SIGTERM", r.name)
		}
	}
	stopConsuming()
	consumed()
	// What reached the brokers must all be read before the verdict.
	if len(s.brokers) > 0 {
		w.waitConsumed()
	}

	rows := w.prod.committed()
	final := w.finalStates()
	// An inbox message's sequence is drawn when the relay makes its outbox
	// row; the inbox promises receive order per aggregate, and each
	// aggregate's messages were sent one after another.
	lastSeq := map[string]row{}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].N < rows[j].N })
	for i := range rows {
		if !rows[i].Inbox {
			continue
		}
		rows[i].Seq = final[rows[i].ID].Seq
		if prev, ok := lastSeq[rows[i].Key]; ok && rows[i].Seq != 0 && rows[i].Seq < prev.Seq {
			t.Errorf("inbox aggregate %s: message %d was sent after message %d but relayed before it (sequence %d < %d)",
				rows[i].Key, rows[i].N, prev.N, rows[i].Seq, prev.Seq)
		}
		lastSeq[rows[i].Key] = rows[i]
	}
	v := judge(rows, final, w.ledger.snapshot(), w.faults)
	report := w.report(v)
	t.Log("\n" + report)
	if reportFile != "" {
		if err := os.WriteFile(reportFile, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	if v.failed() {
		t.Errorf("the ledger breaks a promise:\n%s", v.problems())
		// What the replicas warned about says what a duplicate or a loss
		// came from (a lost claim, outcomes that could not be written).
		for _, r := range w.all() {
			var warns []string
			for _, line := range strings.Split(r.logs.String(), "\n") {
				if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
					warns = append(warns, line)
				}
			}
			if len(warns) > 0 {
				t.Logf("%s warned:\n%s", r.name, tail(strings.Join(warns, "\n"), 4000))
			}
		}
		for _, r := range rows {
			if _, ok := final[r.ID]; !ok && r.Inbox {
				t.Logf("inbox message %d of %s (%s): %s", r.N, r.Key, r.ID, w.inboxRow(r.ID))
			}
		}
	}
	w.prod.mu.Lock()
	failures := w.prod.failures
	w.prod.mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("%d producer transactions failed:\n%s", len(failures), strings.Join(failures[:min(10, len(failures))], "\n"))
	}
	if len(rows) < s.minRows {
		t.Errorf("%d rows committed, want at least %d", len(rows), s.minRows)
	}
	// A replica that hung past its lease had its late outcomes refused:
	// every duplicate of a row it had sent proves one such write.
	for i, f := range w.faults {
		if f.Stopped != "" && v.Dups[i] > 0 && (!f.LostClaimsKnown || f.LostClaims == 0) {
			t.Errorf("%s: %d duplicates, but the stopped replica counted no lost claim (known %v)", f.Name, v.Dups[i], f.LostClaimsKnown)
		}
	}
}

// waitConsumed polls the brokers until every row routed to one has been
// read (or a minute passed: the verdict then names what is missing).
func (w *world) waitConsumed() {
	want := map[string]map[string]bool{}
	for _, r := range w.prod.committed() {
		if r.Dest == "http" {
			continue
		}
		if want[r.Dest] == nil {
			want[r.Dest] = map[string]bool{}
		}
		want[r.Dest][r.ID] = true
	}
	_ = testkit.Poll(time.Minute, func() error { // the verdict names what is missing
		w.poll()
		got := map[string]map[string]bool{}
		for _, d := range w.ledger.snapshot() {
			if got[d.Dest] == nil {
				got[d.Dest] = map[string]bool{}
			}
			got[d.Dest][d.ID] = true
		}
		missing := 0
		for dest, ids := range want {
			for id := range ids {
				if !got[dest][id] {
					missing++
				}
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d rows not read", missing)
		}
		return nil
	})
}

// report is the table of docs/reliability.md: one line per fault.
func (w *world) report(v *verdict) string {
	var b strings.Builder
	dests := make([]string, 0, len(v.PerDest))
	for d := range v.PerDest {
		dests = append(dests, d)
	}
	sort.Strings(dests)
	var per []string
	for _, d := range dests {
		per = append(per, fmt.Sprintf("%s %d", d, v.PerDest[d]))
	}
	lostTotal, disorderTotal, dupTotal := len(v.Lost), len(v.Disorder), 0
	w.prod.mu.Lock()
	txs, failed, inboxed := w.prod.txs, len(w.prod.failures), w.prod.inbox
	w.prod.mu.Unlock()
	for _, n := range v.Dups {
		dupTotal += n
	}
	fmt.Fprintf(&b, "%d rows (%s; %d of them came in through the inbox's HTTP source), %d deliveries, %d replicas; lost %d, out of order %d, not delivered at the end %d, stale sends %d, duplicates %d (unexplained %d), producer transactions and inbox messages %d (failed %d)\n\n",
		v.Rows, strings.Join(per, ", "), inboxed, v.Requests, w.s.replicas, lostTotal, disorderTotal, len(v.Stuck), len(v.Stale), dupTotal, len(v.Unexplained), txs+inboxed, failed)
	b.WriteString("| fault | lasted | rows written | lost | out of order | duplicates | time to recover |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	line := func(name string, phase int, lasted, rec time.Duration) {
		r, l := "-", "-"
		if phase >= 0 {
			r, l = fmt.Sprintf("%.1f s", rec.Seconds()), fmt.Sprintf("%.1f s", lasted.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %s |\n", name, l, v.PhaseRows[phase], v.PhaseLost[phase], v.PhaseDisorder[phase], v.Dups[phase], r)
	}
	line("(start-up, before any fault)", -1, 0, 0)
	for i, f := range w.faults {
		name := f.Name
		if f.Note != "" {
			name += " (" + f.Note + ")"
		}
		if f.Stopped != "" && f.LostClaimsKnown {
			name += fmt.Sprintf(" (the stopped replica counted %.0f lost claims)", f.LostClaims)
		}
		line(name, i, f.Healed.Sub(f.Start), f.Recovered)
	}
	b.WriteString("\nDuplicates per fault, by who sent the first accepted copy and who sent it again:\n")
	for i, f := range w.faults {
		if len(v.DupPairs[i]) == 0 {
			continue
		}
		var pairs []string
		for p, n := range v.DupPairs[i] {
			pairs = append(pairs, fmt.Sprintf("%s: %d", p, n))
		}
		sort.Strings(pairs)
		fmt.Fprintf(&b, "- %s: %s\n", f.Name, strings.Join(pairs, ", "))
	}
	return b.String()
}
