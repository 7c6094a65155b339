package faults

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// The verdict is only as good as its checks: each case below breaks one
// promise in a made-up ledger and must be caught, and a clean ledger with
// duplicates after a fault must pass.

type script struct {
	l      ledger
	rows   []row
	final  map[string]finalState
	faults []*faultRecord
}

func newScript() *script { return &script{final: map[string]finalState{}} }

func (s *script) row(id, key string, seq int64, dest string) {
	s.rows = append(s.rows, row{ID: id, Key: key, Seq: seq, Dest: dest, CommittedAt: time.Now()})
	s.final[id] = finalState{State: "delivered"}
}

// send records a request that arrives and is answered at once.
func (s *script) send(id, replica string, o outcome) {
	d := s.l.arrive(delivery{Dest: "http", ID: id, Replica: replica})
	s.l.finish(d, o, 200)
}

func (s *script) fault(name string, dups bool) *faultRecord {
	f := &faultRecord{Name: name, Dups: dups, Start: later()}
	s.faults = append(s.faults, f)
	moveOn()
	return f
}

// moveOn returns once the clock has moved on, so that what the script
// records after it is strictly later than what it recorded before.
func moveOn() {
	t0 := time.Now()
	for !time.Now().After(t0) {
		runtime.Gosched()
	}
}

// later is the time after moveOn.
func later() time.Time {
	moveOn()
	return time.Now()
}

func (s *script) judge() *verdict {
	// Keys route by their rows' destination; the script's keys are HTTP
	// unless a row says otherwise.
	return judge(s.rows, s.final, s.l.snapshot(), s.faults)
}

func wantProblem(t *testing.T, v *verdict, list []string, want string) {
	t.Helper()
	if !v.failed() {
		t.Fatalf("the verdict passed; want a problem with %q", want)
	}
	for _, p := range list {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Fatalf("no problem says %q:\n%s", want, v.problems())
}

func TestVerdictPassesDuplicatesAfterAFault(t *testing.T) {
	s := newScript()
	s.row("a", "k", 1, "http")
	s.row("b", "k", 2, "http")
	s.send("a", "r1", accepted)
	s.fault("kill r1", true)
	s.send("a", "r2", accepted) // r1 died before it wrote the outcome
	s.send("b", "r2", accepted)
	v := s.judge()
	if v.failed() || v.Dups[0] != 1 {
		t.Fatalf("dups %v:\n%s", v.Dups, v.problems())
	}
}

func TestVerdictCatchesALostRow(t *testing.T) {
	s := newScript()
	s.row("a", "", 1, "http")
	s.row("b", "", 2, "http")
	s.send("a", "r1", accepted)
	s.send("b", "r1", refused)
	v := s.judge()
	wantProblem(t, v, v.Lost, "row b")
}

func TestVerdictCatchesARowSentBeforeTheEarlierWasAccepted(t *testing.T) {
	s := newScript()
	s.row("a", "k", 1, "http")
	s.row("b", "k", 2, "http")
	da := s.l.arrive(delivery{Dest: "http", ID: "a", Replica: "r1"})
	db := s.l.arrive(delivery{Dest: "http", ID: "b", Replica: "r1"}) // overlaps a
	s.l.finish(da, accepted, 200)
	s.l.finish(db, accepted, 200)
	v := s.judge()
	wantProblem(t, v, v.Disorder, "sequence 2 sent")
}

func TestVerdictCatchesARowSentAfterAnEarlierOneFailed(t *testing.T) {
	s := newScript()
	s.row("a", "k", 1, "http")
	s.row("b", "k", 2, "http")
	s.send("a", "r1", refused)
	s.send("b", "r1", accepted)
	s.send("a", "r1", accepted)
	v := s.judge()
	wantProblem(t, v, v.Disorder, "before sequence 1 was accepted")
}

func TestVerdictCatchesBrokerDisorder(t *testing.T) {
	s := newScript()
	s.row("a", "k", 1, "kafka")
	s.row("b", "k", 2, "kafka")
	s.l.consumed(delivery{Dest: "kafka", ID: "b"})
	s.l.consumed(delivery{Dest: "kafka", ID: "a"})
	v := s.judge()
	wantProblem(t, v, v.Disorder, "sequence 2 arrived for the first time (position 0) before sequence 1")
}

func TestVerdictCatchesDuplicatesWithoutAFault(t *testing.T) {
	s := newScript()
	s.row("a", "", 1, "http")
	s.send("a", "r1", accepted)
	s.send("a", "r2", accepted)
	v := s.judge()
	wantProblem(t, v, v.Unexplained, "before any fault")
	s.fault("destination refuses", false)
	s.send("a", "r2", accepted)
	v = s.judge()
	wantProblem(t, v, v.Unexplained, `"destination refuses"`)
}

func TestVerdictCatchesAStuckRow(t *testing.T) {
	s := newScript()
	s.row("a", "", 1, "http")
	s.send("a", "r1", accepted)
	s.final["a"] = finalState{State: "processing"}
	v := s.judge()
	wantProblem(t, v, v.Stuck, "processing")
	delete(s.final, "a")
	v = s.judge()
	wantProblem(t, v, v.Missing, "not in the table")
}

func TestVerdictCatchesAStaleSendAfterSIGCONT(t *testing.T) {
	s := newScript()
	s.row("a", "", 1, "http")
	s.send("a", "r1", accepted)
	f := s.fault("SIGSTOP r1", true)
	f.Stopped = "r1"
	s.send("a", "r2", accepted) // r2 took the row over after r1's lease passed
	f.Healed = later()
	moveOn()
	s.send("a", "r1", accepted) // r1 sends it again after SIGCONT
	v := s.judge()
	wantProblem(t, v, v.Stale, "after SIGCONT")
}

// sendTo records a request to one destination of the fan-out route.
func (s *script) sendTo(dest, id, replica string, o outcome) {
	d := s.l.arrive(delivery{Dest: dest, ID: id, Replica: replica})
	s.l.finish(d, o, 200)
}

// A fan-out row is judged at each of its destinations: one that received
// it and one that did not is a lost delivery, not a pass; the same row at
// both is no duplicate; each destination keeps the key's order on its own
// (the second may fall behind the first); a copy that is not delivered is
// stuck.
func TestVerdictJudgesEachDestinationOfAFanOut(t *testing.T) {
	s := newScript()
	s.row("a", "k", 1, "fan")
	s.row("b", "k", 2, "fan")
	s.sendTo("http", "a", "r1", accepted)
	s.sendTo("http", "b", "r1", accepted)
	s.sendTo("http-b", "a", "r1", refused)
	s.sendTo("http-b", "a", "r1", accepted)
	s.sendTo("http-b", "b", "r1", accepted)
	if v := s.judge(); v.failed() || len(v.Dups) != 0 {
		t.Fatalf("dups %v:\n%s", v.Dups, v.problems())
	}

	s = newScript()
	s.row("a", "k", 1, "fan")
	s.sendTo("http", "a", "r1", accepted)
	v := s.judge()
	wantProblem(t, v, v.Lost, "never reached http-b")

	s = newScript()
	s.row("a", "k", 1, "fan")
	s.row("b", "k", 2, "fan")
	s.sendTo("http", "a", "r1", accepted)
	s.sendTo("http", "b", "r1", accepted)
	s.sendTo("http-b", "b", "r1", accepted)
	s.sendTo("http-b", "a", "r1", accepted)
	v = s.judge()
	wantProblem(t, v, v.Disorder, "key k@http-b: sequence 2 sent")

	s = newScript()
	s.row("a", "k", 1, "fan")
	s.sendTo("http", "a", "r1", accepted)
	s.sendTo("http-b", "a", "r1", accepted)
	s.final[copyState("http-b", "a")] = finalState{State: "pending", Attempt: 3, LastError: "HTTP 503"}
	v = s.judge()
	wantProblem(t, v, v.Stuck, "its copy for http-b: pending")
}
