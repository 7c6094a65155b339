package claimplan

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// sim drives a planner through events on a time it moves itself: no
// database, no clock, no sleep.
type sim struct {
	t   *testing.T
	p   *Planner
	now time.Time
	// armed is when each timer fires (zero: disarmed), from the actions.
	armed [Timers]time.Time
	// running are the claims started and not done, oldest first.
	running []Claim
	last    Actions
	// answer, when set, answers every probe at once.
	answer *dialects.Probe
}

func newSim(t *testing.T, cfg Config) *sim {
	t.Helper()
	if cfg.BatchSize == 0 {
		cfg = Config{BatchSize: 100, MaxInFlight: 1000, ProbeInterval: 2 * time.Millisecond, PollInterval: 500 * time.Millisecond, Statements: 2}
	}
	return &sim{t: t, p: New(Default(), cfg), now: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
}

func (s *sim) step(e Event) Actions {
	s.t.Helper()
	a := s.p.Step(s.now, e)
	for _, arm := range a.Arms {
		if arm.After < 0 {
			s.armed[arm.Timer] = time.Time{}
		} else {
			s.armed[arm.Timer] = s.now.Add(arm.After)
		}
	}
	s.running = append(s.running, a.Claims...)
	s.last = a
	return a
}

// advance moves the time by d, firing the timers due on the way in order.
func (s *sim) advance(d time.Duration) (claims int, probes int) {
	s.t.Helper()
	end := s.now.Add(d)
	for {
		next, at := Timer(0), time.Time{}
		for i, t := range s.armed {
			if !t.IsZero() && !t.After(end) && (at.IsZero() || t.Before(at)) {
				next, at = Timer(i), t
			}
		}
		if at.IsZero() {
			s.now = end
			return claims, probes
		}
		s.now = at
		s.armed[next] = time.Time{}
		a := s.step(Fired{Timer: next})
		claims += len(a.Claims)
		if a.Probe {
			probes++
			if s.answer != nil {
				claims += len(s.step(Probed{Probe: *s.answer}).Claims)
			}
		}
	}
}

// done ends the oldest running claim with n rows over keys keys (all
// unkeyed when keys is 0), seeing seen.
func (s *sim) done(n, keys int, seen int64) Actions {
	s.t.Helper()
	if len(s.running) == 0 {
		s.t.Fatal("no claim runs")
	}
	c := s.running[0]
	s.running = s.running[1:]
	rows := make([]dialects.Row, n)
	for i := range rows {
		if keys > 0 {
			rows[i].Key = fmt.Sprintf("k%03d", i%keys)
		}
		rows[i].Sequence = int64(i + 1)
	}
	dialects.SortClaimed(rows)
	probe := dialects.Probe{Last: seen, Xmin: 10, Next: 10, Writer: dialects.NoWriters, Writers: []int64{}}
	if c.Watermark != nil {
		c.Watermark.Observe(probe, s.now)
	}
	return s.step(ClaimDone{Claim: c, Rows: rows, Probe: &probe, Seen: seen, Settled: seen,
		Report: dialects.ClaimReport{Now: s.now}, Took: time.Millisecond})
}

func (s *sim) fail(err error) Actions {
	s.t.Helper()
	c := s.running[0]
	s.running = s.running[1:]
	return s.step(ClaimDone{Claim: c, Err: err})
}

// quiet starts the planner and brings it to Quiet the way a relay gets
// there: its first claim (one head: the policy starts at long runs) takes a
// row and is full, the next finds nothing.
func (s *sim) quiet(listening bool) {
	s.t.Helper()
	s.step(Start{Listening: listening})
	if a := s.done(1, 1, 1); len(a.Claims) != 2 {
		s.t.Fatalf("a full first claim: %d claims after it, want 2 (a backlog, two at a time)", len(a.Claims))
	}
	for len(s.running) > 0 {
		s.done(0, 0, 1)
	}
	s.step(Credit{N: 1})
	s.mode(Quiet)
}

func (s *sim) mode(want Mode) {
	s.t.Helper()
	if got := s.p.Mode(); got != want {
		s.t.Fatalf("mode %s, want %s", got, want)
	}
}

func (s *sim) armedIn(t Timer) time.Duration {
	if s.armed[t].IsZero() {
		return -1
	}
	return s.armed[t].Sub(s.now)
}

// A relay whose wake-ups listen claims when one comes, takes what it
// finds, and then waits: no probe but the safety net, no claim at the
// poll, none at a returned credit that can have no successor.
func TestListeningClaimsOnWakeUpsOnly(t *testing.T) {
	s := newSim(t, Config{})
	s.quiet(true)
	// Just after wake-ups began to listen, a commit made while they set up
	// may have sent none: a few backed-off probes for a moment.
	if got := s.armedIn(TimerProbe); got != Default().IdleProbe {
		t.Fatalf("listening for a moment: probe in %v, want %v", got, Default().IdleProbe)
	}
	s.answer = &dialects.Probe{Last: 1, Writer: dialects.NoWriters, Writers: []int64{}}
	if _, probes := s.advance(2 * time.Second); probes == 0 || probes > 8 {
		t.Fatalf("the first 2 s of listening: %d probes, want a few", probes)
	}
	s.answer = nil
	if got := s.armedIn(TimerProbe); got <= time.Second || got > Default().SafetyProbe {
		t.Fatalf("quiet and listening: probe in %v, want the safety probe's %v", got, Default().SafetyProbe)
	}
	if claims, probes := s.advance(4 * time.Second); claims != 0 || probes != 0 {
		t.Fatalf("4 s quiet: %d claims and %d probes, want none", claims, probes)
	}
	// A row commits: one claim at once.
	if a := s.step(Nudge{Listening: true}); len(a.Claims) != 1 {
		t.Fatalf("a wake-up: %d claims, want 1 at once", len(a.Claims))
	}
	// Another commits while it runs: one claim after it, not beside it.
	if a := s.step(Nudge{Listening: true}); len(a.Claims) != 0 {
		t.Fatalf("a wake-up while a claim runs: %d claims beside it, want none", len(a.Claims))
	}
	if a := s.done(1, 1, 1); len(a.Claims) != 1 {
		t.Fatalf("the claim that ran during a wake-up ended: %d claims, want 1 more", len(a.Claims))
	}
	if a := s.done(1, 1, 2); len(a.Claims) != 0 {
		t.Fatalf("then: %d claims, want none", len(a.Claims))
	}
	s.mode(Quiet)
	// Both rows delivered; nothing arrived since their claims: no claim.
	if a := s.step(Credit{N: 2, Continued: []Continuation{{Pos: dialects.KeyPosition{Key: "k000", After: 2}, Ended: true}}}); len(a.Claims) != 0 {
		t.Fatalf("credit with no successor: %d claims, want none", len(a.Claims))
	}
	if claims, _ := s.advance(10 * time.Second); claims != 0 {
		t.Fatalf("10 s quiet: %d claims, want none (polls claim only after the idle poll)", claims)
	}
	if claims, _ := s.advance(Default().IdlePoll); claims == 0 {
		t.Fatal("no claim at the idle poll")
	}
}

// What brings a quiet planner to claim again, each on its own.
func TestWhatWakesAQuietPlanner(t *testing.T) {
	cases := []struct {
		name  string
		event Event
		claim bool
	}{
		{"a wake-up", Nudge{Listening: true}, true},
		{"inbox rows relayed", Woken{}, true},
		{"rows of expired leases released", Woken{Released: true}, true},
		{"credit: a finished key may have a next row", Credit{N: 1, Successors: true}, true},
		{"credit: rows released untouched", Credit{N: 1, Released: true}, true},
		{"credit: a key whose run was cut", Credit{N: 1, Continued: []Continuation{{Pos: dialects.KeyPosition{Key: "a", After: 3}}}}, true},
		{"credit alone", Credit{N: 1}, false},
		{"credit: a key that ended", Credit{N: 1, Continued: []Continuation{{Pos: dialects.KeyPosition{Key: "a", After: 3}, Ended: true}}}, false},
		{"credit: a retry later", Credit{N: 1, RetryIn: time.Second}, false},
		{"a look at the horizon", HorizonSeen{Horizon: &dialects.Horizon{}}, false},
		{"stragglers found", StragglersDone{Found: true, Ago: time.Second}, true},
		{"no stragglers", StragglersDone{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, Config{})
			s.quiet(true)
			a := s.step(c.event)
			if got := len(a.Claims) > 0; got != c.claim {
				t.Fatalf("claims: %v, want %v (mode %s)", got, c.claim, s.p.Mode())
			}
		})
	}
}

// A retry or a deferral that comes due later arms the due timer, which
// claims when it fires.
func TestARetryComesDueOnItsTimer(t *testing.T) {
	s := newSim(t, Config{})
	s.quiet(true)
	s.step(Credit{N: 1, RetryIn: 700 * time.Millisecond})
	if got := s.armedIn(TimerDue); got != 700*time.Millisecond {
		t.Fatalf("due timer in %v, want 700ms", got)
	}
	if claims, _ := s.advance(699 * time.Millisecond); claims != 0 {
		t.Fatalf("before the retry is due: %d claims", claims)
	}
	if claims, _ := s.advance(time.Millisecond); claims != 1 {
		t.Fatalf("when the retry is due: %d claims, want 1", claims)
	}
}

// Without wake-ups the planner probes: at the base interval while rows are
// in flight or something happened in the last second, then backing off
// from 25 ms to 250 ms; news brings it back. When wake-ups stop listening,
// it probes that way too, and when they listen again, it stops.
func TestProbesBackOffAndFallBackWhenWakeUpsStop(t *testing.T) {
	s := newSim(t, Config{})
	s.quiet(false)
	s.step(Nudge{Listening: false})
	s.done(10, 0, 10) // unkeyed, in flight
	if got := s.armedIn(TimerProbe); got != 2*time.Millisecond {
		t.Fatalf("rows in flight: probe in %v, want the base 2ms", got)
	}
	s.step(Credit{N: 10})
	s.answer = &dialects.Probe{Last: 10, Writer: dialects.NoWriters, Writers: []int64{}}
	if _, probes := s.advance(100 * time.Millisecond); probes != 50 {
		t.Fatalf("active for 100 ms: %d probes, want 50 (one each 2 ms)", probes)
	}
	s.advance(time.Second) // past IdleAfter: backing off
	s.answer = nil
	var gaps []time.Duration
	for range 6 {
		s.step(Probed{Probe: dialects.Probe{Last: 10, Writer: dialects.NoWriters, Writers: []int64{}}})
		gaps = append(gaps, s.armedIn(TimerProbe))
		s.now = s.armed[TimerProbe]
		s.armed[TimerProbe] = time.Time{}
		s.step(Fired{Timer: TimerProbe})
	}
	for i, g := range gaps {
		if g < 25*time.Millisecond || g > 250*time.Millisecond || i > 0 && g < gaps[i-1] {
			t.Fatalf("idle probe gaps %v: want them growing from 25 ms to 250 ms at most", gaps)
		}
	}
	if gaps[len(gaps)-1] != 250*time.Millisecond {
		t.Fatalf("idle probe gaps %v: want them to reach 250 ms", gaps)
	}
	// A row arrives: the probe sees it and claims; the pace is busy again.
	s.p.probing = true
	if a := s.step(Probed{Probe: dialects.Probe{Last: 11, Writer: dialects.NoWriters, Writers: []int64{}}}); len(a.Claims) != 1 {
		t.Fatalf("a probe that saw a row: %d claims, want 1", len(a.Claims))
	}
	s.done(1, 0, 11)
	if got := s.armedIn(TimerProbe); got != 2*time.Millisecond {
		t.Fatalf("after news: probe in %v, want 2ms", got)
	}
	// Wake-ups start listening: a few backed-off probes for a moment (a
	// commit while they set up may have sent no wake-up), then only the
	// safety probe.
	s.step(Credit{N: 1})
	s.step(Nudge{Listening: true})
	s.done(0, 0, 11)
	if got := s.armedIn(TimerProbe); got != Default().IdleProbe {
		t.Fatalf("just listening: probe in %v, want %v", got, Default().IdleProbe)
	}
	s.answer = &dialects.Probe{Last: 11, Writer: dialects.NoWriters, Writers: []int64{}}
	s.advance(2 * time.Second)
	if got := s.armedIn(TimerProbe); got <= time.Second {
		t.Fatalf("listening: probe in %v, want the safety probe", got)
	}
}

// While wake-ups listen and rows wait to settle (a writer was open at the
// probe: it may roll back, which no wake-up tells), the planner probes on
// the backed-off range until they settle.
func TestListeningProbesWhileRowsWaitToSettle(t *testing.T) {
	s := newSim(t, Config{})
	s.step(Start{Listening: true})
	c := s.running[0]
	s.running = nil
	// The claim's probe saw row 5 and a writer still open.
	probe := dialects.Probe{Last: 5, Xmin: 10, Next: 12, Writer: 11, Writers: []int64{11}}
	s.step(ClaimDone{Claim: c, Probe: &probe, Seen: 5, Report: dialects.ClaimReport{Empty: true}, Took: time.Millisecond})
	if got := s.armedIn(TimerProbe); got != Default().IdleProbe {
		t.Fatalf("rows wait to settle: probe in %v, want %v", got, Default().IdleProbe)
	}
	// The writer ended: the probe settles the rows, and the planner claims.
	if a := s.step(Probed{Probe: dialects.Probe{Last: 5, Xmin: 12, Next: 13, Writer: dialects.NoWriters, Writers: []int64{}}}); len(a.Claims) != 1 {
		t.Fatalf("rows settled: %d claims, want 1", len(a.Claims))
	}
}

// While a long transaction holds the horizon back, a claim that was not
// full waits for HeldClaimEvery since the last one started; a full claim
// is followed at once. Once the horizon is clear, no claim waits.
func TestClaimsArePacedWhileTheHorizonIsHeld(t *testing.T) {
	tune := Default()
	held := &dialects.Horizon{Holder: &dialects.HorizonHolder{Since: time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)},
		ReadAt: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	s := newSim(t, Config{})
	s.step(HorizonSeen{Horizon: held})
	s.quiet(true)
	s.advance(tune.HeldClaimEvery)
	s.step(Nudge{Listening: true})
	s.advance(time.Millisecond)
	s.done(3, 3, 3)
	s.step(Credit{N: 3})
	// A row arrives 1 ms after the last claim started: it waits.
	a := s.step(Nudge{Listening: true})
	if len(a.Claims) != 0 {
		t.Fatal("a claim started less than HeldClaimEvery after the last one")
	}
	s.mode(Paced)
	if got := s.armedIn(TimerPace); got != tune.HeldClaimEvery-time.Millisecond {
		t.Fatalf("paced: the claim waits %v, want %v", got, tune.HeldClaimEvery-time.Millisecond)
	}
	if claims, _ := s.advance(tune.HeldClaimEvery); claims != 1 {
		t.Fatalf("after the pace: %d claims, want 1", claims)
	}
	// A full claim: the next follows at once.
	if a := s.done(100, 100, 200); len(a.Claims) == 0 {
		t.Fatal("a full claim under a held horizon was not followed at once")
	}
	for len(s.running) > 0 {
		s.done(0, 0, 200)
	}
	s.step(Credit{N: 100})
	// The horizon clears: no wait.
	s.step(HorizonSeen{Horizon: &dialects.Horizon{}})
	if a := s.step(Nudge{Listening: true}); len(a.Claims) != 1 {
		t.Fatalf("horizon clear: %d claims, want 1 at once", len(a.Claims))
	}
}

// While the database refuses claims, they wait for a back-off that doubles
// from 100 ms up to 5 s; a probe it refuses counts the same; a claim that
// works ends it.
func TestARefusingDatabaseIsNotHammered(t *testing.T) {
	down := errors.New("connection refused")
	s := newSim(t, Config{})
	s.step(Start{Listening: true})
	s.fail(down)
	s.mode(Failing)
	var waits []time.Duration
	for range 7 {
		waits = append(waits, s.armedIn(TimerRetry))
		if claims, _ := s.advance(s.armedIn(TimerRetry)); claims != 1 {
			t.Fatalf("after the back-off: %d claims, want 1", claims)
		}
		s.fail(down)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("back-offs %v, want %v", waits, want)
		}
	}
	if a := s.step(Nudge{Listening: true}); len(a.Claims) != 0 {
		t.Fatal("a wake-up made a failing planner claim before its back-off")
	}
	s.advance(s.armedIn(TimerRetry))
	s.done(0, 0, 0)
	s.mode(Quiet)
	if s.p.Failures() != 0 {
		t.Fatalf("failures %d after a claim that worked", s.p.Failures())
	}
	// A refused probe fails the same way.
	s.step(Fired{Timer: TimerProbe})
	s.step(Probed{Err: down})
	s.mode(Failing)
}

// A claimer that may not see other transactions neither probes nor gates:
// it claims at every poll.
func TestABlindPlannerClaimsAtEveryPoll(t *testing.T) {
	s := newSim(t, Config{})
	s.step(Start{Listening: false})
	c := s.running[0]
	s.running = nil
	s.step(ClaimDone{Claim: c, Err: fmt.Errorf("%w: no VIEW SERVER STATE", dialects.ErrNotPermitted), Blind: true})
	if !s.p.Blind() {
		t.Fatal("not blind")
	}
	// It claims again at once, without a watermark.
	if len(s.running) != 1 || s.running[0].Watermark != nil {
		t.Fatalf("after going blind: %d claims running (want 1, without a watermark)", len(s.running))
	}
	s.done(0, 0, 0)
	for i := range 4 {
		claims, probes := s.advance(500 * time.Millisecond)
		if probes != 0 || claims != 1 {
			t.Fatalf("poll %d, blind: %d claims and %d probes, want 1 claim and no probe", i+1, claims, probes)
		}
		s.done(0, 0, 0)
	}
}

// A drain starts no claim; the planner is drained once every row's
// outcome is written and no claim runs.
func TestADrainingPlannerClaimsNothing(t *testing.T) {
	s := newSim(t, Config{})
	s.step(Start{Listening: true})
	s.step(Drain{})
	s.done(10, 2, 10)
	if s.p.Drained() {
		t.Fatal("drained with 10 rows in flight")
	}
	if a := s.step(Nudge{Listening: true}); len(a.Claims) != 0 {
		t.Fatal("a draining planner claimed")
	}
	s.step(Credit{N: 10})
	if !s.p.Drained() {
		t.Fatal("not drained with every outcome written")
	}
}

// A full claim is followed by another at once, two at a time, while credit
// lasts; credit that comes back resumes them.
func TestABacklogIsClaimedBackToBack(t *testing.T) {
	s := newSim(t, Config{BatchSize: 100, MaxInFlight: 300, ProbeInterval: 2 * time.Millisecond, PollInterval: 500 * time.Millisecond, Statements: 2})
	s.step(Start{Listening: true})
	if a := s.done(100, 0, 1000); len(a.Claims) != 2 {
		t.Fatalf("after a full claim: %d claims, want 2", len(a.Claims))
	}
	s.mode(Backlog)
	s.done(100, 0, 1000)
	s.done(100, 0, 1000)
	if len(s.running) != 0 {
		t.Fatalf("%d claims run with the credit spent", len(s.running))
	}
	if a := s.step(Credit{N: 100}); len(a.Claims) != 1 {
		t.Fatalf("credit back in a backlog: %d claims, want 1", len(a.Claims))
	}
}

// A claim's probe says when the next row scheduled later comes due: the
// planner claims then, with no ask of its own; an earlier retry comes first.
func TestARowScheduledLaterComesDueOnItsTimer(t *testing.T) {
	s := newSim(t, Config{})
	s.quiet(true)
	s.step(Nudge{Listening: true})
	c := s.running[0]
	s.running = nil
	probe := dialects.Probe{Last: 2, Xmin: 10, Next: 10, Writer: dialects.NoWriters, Writers: []int64{}, NextDue: 3 * time.Second, Later: true}
	s.step(ClaimDone{Claim: c, Probe: &probe, Seen: 2, Settled: 2, Report: dialects.ClaimReport{Empty: true}, Took: time.Millisecond})
	s.mode(Quiet)
	if got := s.armedIn(TimerDue); got != 3*time.Second {
		t.Fatalf("due timer in %v, want 3s", got)
	}
	s.step(Credit{N: 1, RetryIn: time.Second})
	if got := s.armedIn(TimerDue); got != time.Second {
		t.Fatalf("after a retry due in 1 s: due timer in %v, want 1s", got)
	}
	if claims, _ := s.advance(time.Second); claims != 1 {
		t.Fatalf("at the retry: %d claims, want 1", claims)
	}
}

// A row that comes due (a probe said when) may be a key's head that no
// continuation leads to: the claim at its due time walks the keys, even
// when the last walk's cost would have spaced the next one further out.
func TestARowComingDueMakesTheClaimWalkTheKeys(t *testing.T) {
	s := newSim(t, Config{})
	s.step(Start{Listening: true})
	c := s.running[0]
	s.running = nil
	if c.Walk != dialects.WalkKeys {
		t.Fatalf("the first claim walks %v, want the keys", c.Walk)
	}
	probe := dialects.Probe{Last: 5, Xmin: 10, Next: 10, Writer: dialects.NoWriters, Writers: []int64{}}
	s.step(ClaimDone{Claim: c, Probe: &probe, Seen: 5, Settled: 5, Report: dialects.ClaimReport{Empty: true}, Took: time.Millisecond})
	s.advance(50 * time.Millisecond)
	// Rows arrived: a walk over the keys that has seen them took 100 ms, so
	// the next is due 2 s later by its cost. Its probe says a row comes
	// due in 300 ms.
	s.step(Nudge{Listening: true})
	c = s.running[0]
	s.running = nil
	if c.Walk != dialects.WalkKeys {
		t.Fatalf("the claim after the wake-up walks %v, want the keys", c.Walk)
	}
	probe.NextDue, probe.Later = 300*time.Millisecond, true
	s.step(ClaimDone{Claim: c, Probe: &probe, Seen: 5, Settled: 5, Report: dialects.ClaimReport{Empty: true}, Took: 100 * time.Millisecond})
	s.mode(Quiet)
	if claims, _ := s.advance(300 * time.Millisecond); claims != 1 {
		t.Fatalf("when the row comes due: %d claims, want 1", claims)
	}
	if w := s.running[0].Walk; w != dialects.WalkKeys {
		t.Fatalf("the claim at the due time walks %v, want the keys", w)
	}
}
