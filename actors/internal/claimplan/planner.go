package claimplan

import (
	"slices"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// Mode is what the claimer is doing about claims. Exactly one holds at a
// time; the package doc says when each begins and ends.
type Mode uint8

const (
	// Quiet: the last claim took everything it could see. No claim starts
	// until news says there may be more: a wake-up, a probe that saw rows
	// arrive or settle, rows coming due, rows coming back, a finished run
	// whose key may have a next row, or the idle poll.
	Quiet Mode = iota
	// Ready: there may be rows to take; a claim starts as soon as credit
	// and a statement allow.
	Ready
	// Backlog: the last claim came back full, so more rows wait; claims
	// follow each other back to back, up to the statement budget at once.
	Backlog
	// Paced: the horizon is held and the last claim was not full; the next
	// claim waits until Tuning.HeldClaimEvery has passed since the last one
	// started.
	Paced
	// Failing: the database refused the last claim or probe; claims
	// resume after a back-off.
	Failing
	// Draining: the engine stops; no claim starts again.
	Draining
	modes
)

func (m Mode) String() string {
	return [...]string{"quiet", "ready", "backlog", "paced", "failing", "draining"}[m]
}

// Kind is the kind of a claim: in schedule order or by key (see heads.go).
type Kind = claimKind

// The kinds of claim.
const (
	InScheduleOrder = scheduleClaim
	ByKey           = byKeyClaim
	Kinds           = claimKinds
)

// Timer names the planner's timers. The claimer keeps at most one of each
// armed; arming one again replaces it.
type Timer uint8

const (
	// TimerProbe: probe now (the pace's interval passed).
	TimerProbe Timer = iota
	// TimerPoll: the poll (Config.PollInterval): claim while Ready, held or
	// blind, or when the idle poll is due.
	TimerPoll
	// TimerDue: a row scheduled later comes due.
	TimerDue
	// TimerPace: a paced claim may start.
	TimerPace
	// TimerRetry: the back-off after a refused claim passed.
	TimerRetry
	// TimerSlow: the claim that started last still runs: probe beside it.
	TimerSlow
	// Timers is how many timers there are.
	Timers
)

// Config is what the planner is given once.
type Config struct {
	BatchSize, MaxInFlight int
	// ProbeInterval is the base probe interval; PollInterval the poll's.
	ProbeInterval, PollInterval time.Duration
	// Statements is how many claims may run at once (changed by Budget).
	Statements int
}

// Planner decides what the claimer does next. It does no I/O and reads no
// clock: Step takes the time and what was observed, and returns what to do.
// It is not safe for concurrent use; its owner (the claimer actor) calls it
// from its Receive only.
type Planner struct {
	t   Tuning
	cfg Config

	mode Mode
	// again: news came while a claim ran; claim again when it returns.
	again bool
	// retryAt is when a Failing planner may claim again.
	retryAt time.Time
	failed  backoff.Capped
	// listening: wake-ups flow. blind: the database will not show other
	// transactions, so rows are neither gated nor probed.
	listening, blind bool

	free, waitCredit int
	claiming         int
	statements       int

	wm dialects.Watermark
	// saw is what the last claim knew: a probe that sees more is news.
	saw    mark
	reach  reach
	heads  headPolicy
	choice claimChoice
	// cursor is where the next claim by key goes on.
	cursor string

	pace    Pace
	probing bool
	// probeAt is when the armed probe timer fires (zero: none armed).
	probeAt time.Time
	// lastNews is when something last arrived, settled or was claimed;
	// listenedAt when wake-ups last began to listen (a commit while they
	// set up may have sent none).
	lastNews, listenedAt time.Time

	// dueAt is when the armed due timer fires (zero: none is armed): the
	// earliest row put back for later, or scheduled later, that the
	// planner knows of (the probes and the credit tell).
	dueAt time.Time
	// typical is a moving average of the claims' durations; lastStart is
	// when the last claim started.
	typical   time.Duration
	lastStart time.Time
	started   bool
}

// New returns a planner that has all the credit and has claimed nothing.
func New(t Tuning, cfg Config) *Planner {
	p := &Planner{
		t: t, cfg: cfg, mode: Ready,
		failed:     backoff.Capped{First: t.FailFirst, Max: t.FailMax},
		free:       cfg.MaxInFlight,
		statements: max(cfg.Statements, 1),
		reach:      newReach(t),
		heads:      newHeadPolicy(t),
		choice:     claimChoice{keyed: 0.5, shallow: t.ShallowRun},
		pace:       NewPace(t, cfg.ProbeInterval),
	}
	return p
}

// Claim is a claim to start. The claimer runs it (probing first on
// Watermark, when set) and hands it back in ClaimDone unchanged.
type Claim struct {
	Limit, Heads int
	Kind         Kind
	// Walk, After, Continue and Bounds are the claim statement's inputs
	// (dialects.ClaimParams).
	Walk     dialects.ClaimWalk
	After    string
	Continue []dialects.KeyPosition
	Bounds   *dialects.Bounds
	// Watermark is a copy of the gate's watermark for the claim to probe
	// into (nil: blind, claim every head).
	Watermark *dialects.Watermark
	// Rewinds is the rewind counter the claim's bounds were made at: a key
	// position learnt from its rows holds only while it stands there.
	Rewinds int64
	run     int
	plan    claimPlan
}

// FromStart reports whether the claim walks in schedule order from the
// start (after a rewind, or rows released back to pending).
func (c Claim) FromStart() bool { return c.Kind == scheduleClaim && c.plan.full }

// ReadFloors asks for a read of the floors.
type ReadFloors struct {
	Settled int64
	Prev    dialects.Floors
}

// LookForStragglers asks for a look for stragglers.
type LookForStragglers struct {
	Gate   *dialects.Gate
	Bounds dialects.Bounds
}

// Arm arms (or, with After < 0, disarms) one timer.
type Arm struct {
	Timer Timer
	After time.Duration
}

// Actions are what one step asks the claimer to do, in this order: arm the
// timers, start the claims, the probe, and the looks.
type Actions struct {
	Claims     []Claim
	Probe      bool
	Floors     *ReadFloors
	Stragglers *LookForStragglers
	Arms       []Arm
}

func (a *Actions) arm(t Timer, after time.Duration) {
	a.Arms = slices.DeleteFunc(a.Arms, func(x Arm) bool { return x.Timer == t })
	a.Arms = append(a.Arms, Arm{Timer: t, After: after})
}

// Event is something the claimer observed.
type Event interface{ event() }

// The events.
type (
	// Start: the claimer started.
	Start struct{ Listening bool }
	// Nudge: a wake-up said rows committed (or the wake-up source's state
	// changed; Listening is its state now).
	Nudge struct{ Listening bool }
	// Fired: a timer fired.
	Fired struct{ Timer Timer }
	// Probed: a probe ended. Blind: its error says the database will not
	// show other transactions.
	Probed struct {
		Probe dialects.Probe
		Err   error
		Blind bool
	}
	// ClaimDone: a claim ended. Probe is the probe the claim ran first
	// (nil: none); Seen and Settled what its watermark knew from it.
	ClaimDone struct {
		Claim         Claim
		Rows          []dialects.Row
		Report        dialects.ClaimReport
		Cursor        string
		Probe         *dialects.Probe
		Seen, Settled int64
		Took          time.Duration
		Err           error
		Blind         bool
	}
	// Credit: n rows' outcomes are written. Continued are the keys whose
	// runs ended well among them; Successors says one of those keys may
	// have a next row (rows arrived after its run was claimed); RetryIn is
	// how soon the earliest row put back for later comes due (0: none);
	// Released: rows went back to pending as they were.
	Credit struct {
		N          int
		Continued  []Continuation
		Successors bool
		RetryIn    time.Duration
		Released   bool
	}
	// Woken: rows became claimable that no probe would tell of: inbox rows
	// relayed, or (Released) rows of expired leases back to pending.
	Woken struct{ Released bool }
	// HorizonSeen: a look at what holds the database's horizon back.
	HorizonSeen struct{ Horizon *dialects.Horizon }
	// Budget: the claims that may run at once.
	Budget struct{ Statements int }
	// FloorsDone: a read of the floors ended.
	FloorsDone struct {
		Floors dialects.Floors
		Took   time.Duration
		Err    error
	}
	// StragglersDone: a look for stragglers ended.
	StragglersDone struct {
		Ago    time.Duration
		Found  bool
		SentAt time.Time
		Took   time.Duration
		Err    error
	}
	// Drain: the engine stops.
	Drain struct{}
)

func (Start) event()          {}
func (Nudge) event()          {}
func (Fired) event()          {}
func (Probed) event()         {}
func (ClaimDone) event()      {}
func (Credit) event()         {}
func (Woken) event()          {}
func (HorizonSeen) event()    {}
func (Budget) event()         {}
func (FloorsDone) event()     {}
func (StragglersDone) event() {}
func (Drain) event()          {}

// Continuation is a key whose run this replica finished: every row of it up
// to Pos.After is delivered or dead. Ended says the claim that sent the
// run had no other row of the key to give then.
type Continuation struct {
	Pos     dialects.KeyPosition
	Rewinds int64
	Ended   bool
}

// Step takes what was observed at now and returns what to do.
func (p *Planner) Step(now time.Time, e Event) Actions {
	var a Actions
	switch e := e.(type) {
	case Start:
		p.started, p.listening = true, e.Listening
		if e.Listening {
			p.listenedAt = now
		}
		a.arm(TimerPoll, p.cfg.PollInterval)
		p.claim(now, &a)
	case Nudge:
		if e.Listening && !p.listening {
			p.listenedAt = now
		}
		p.listening = e.Listening
		p.news(now)
		if p.claiming > 0 && p.mode != Draining {
			// The running claim read the sequence before it began: the
			// rows of this wake-up may be newer. Claim again after it,
			// rather than beside it.
			p.again = true
			break
		}
		p.wantClaim(now, &a)
	case Fired:
		p.fired(now, e.Timer, &a)
	case Probed:
		p.probed(now, e, &a)
	case ClaimDone:
		p.claimDone(now, e, &a)
	case Credit:
		p.credit(now, e, &a)
	case Woken:
		if e.Released {
			// Rows came back to pending with their old schedule: look at
			// everything again.
			p.reach.lowerTo(time.Time{})
		}
		p.wantClaim(now, &a)
	case HorizonSeen:
		held := e.Horizon != nil && e.Horizon.HeldAtRead(p.t.HeldAfter)
		p.reach.held = held
		if !held && p.mode == Paced {
			p.mode = Ready
			p.claim(now, &a)
		}
	case Budget:
		p.statements = max(e.Statements, 1)
		if p.mode == Backlog {
			p.claim(now, &a)
		}
	case FloorsDone:
		if e.Err != nil && dialects.Blind(e.Err) {
			p.goBlind()
		}
		p.reach.floorsRead(now, e.Floors, e.Took, e.Err)
	case StragglersDone:
		p.reach.stragglersFound(now, e.Ago, e.Found, e.SentAt, e.Took, e.Err)
		if e.Found && e.Err == nil {
			p.wantClaim(now, &a)
		}
	case Drain:
		p.mode = Draining
		a.arm(TimerProbe, -1)
		p.probeAt = time.Time{}
	}
	p.repace(now, &a)
	return a
}

// news notes that rows arrived (or may have): the pace speeds up.
func (p *Planner) news(now time.Time) {
	p.lastNews = now
}

// dueIn arms the due timer for a row that comes due in d, unless it is
// armed sooner already; a claim by key walks the keys by then, since the
// row may be a key's head that no continuation leads to.
func (p *Planner) dueIn(now time.Time, d time.Duration, a *Actions) {
	at := now.Add(max(d, 0))
	p.reach.walkBy(at)
	if p.dueAt.IsZero() || at.Before(p.dueAt) {
		p.dueAt = at
		a.arm(TimerDue, at.Sub(now))
	}
}

// probeSaw takes what a probe says of the rows scheduled later.
func (p *Planner) probeSaw(now time.Time, probe dialects.Probe, a *Actions) {
	if probe.Later {
		p.dueIn(now, probe.NextDue, a)
	}
}

// wantClaim makes the planner Ready and claims at once, or after the
// claim that runs.
func (p *Planner) wantClaim(now time.Time, a *Actions) {
	switch p.mode {
	case Draining, Failing, Paced:
		// The retry and the pace arm their own timers; a drain takes
		// nothing.
		return
	case Quiet:
		p.mode = Ready
	}
	if p.claiming > 0 {
		p.again = true
	}
	p.claim(now, a)
}

func (p *Planner) threshold() int {
	return max(1, min(p.cfg.BatchSize, p.cfg.MaxInFlight)/max(p.t.CreditShare, 1))
}

// claim starts claims while the mode, the credit and the budget allow: one,
// and more while the last one was full.
func (p *Planner) claim(now time.Time, a *Actions) {
	for p.claiming < p.statements && p.claimOne(now, a) {
		if p.mode != Backlog {
			return
		}
	}
}

func (p *Planner) claimOne(now time.Time, a *Actions) bool {
	switch {
	case p.mode == Draining || p.mode == Failing || p.mode == Paced:
		return false
	case p.free < p.threshold():
		return false
	}
	if wait := p.lastStart.Add(p.t.HeldClaimEvery).Sub(now); p.reach.held && p.mode != Backlog && wait > 0 {
		p.mode = Paced
		a.arm(TimerPace, wait)
		return false
	}
	limit := min(p.cfg.BatchSize, p.free)
	heads, run := p.heads.next(limit)
	p.reach.seen = mark{p.wm.LastSeen(), p.wm.Settled()}
	plan := p.reach.plan(now, p.choice.pick(p.heads.run), heads)
	if plan.continueOnly && len(plan.continued) == 0 {
		// By key, with nothing to continue and the walk over the keys not
		// due yet: nothing this claim could take.
		return false
	}
	p.free -= limit
	p.claiming++
	p.lastStart = now
	a.arm(TimerSlow, p.slowAfter())
	c := Claim{Limit: limit, Heads: heads, Kind: plan.kind, Continue: plan.continued, Bounds: plan.bounds,
		Rewinds: p.reach.rewinds, run: run, plan: plan}
	if plan.bounds != nil {
		c.Rewinds = plan.bounds.Rewinds
	}
	switch {
	case plan.kind == byKeyClaim && plan.continueOnly:
		c.Walk = dialects.WalkNone
	case plan.kind == byKeyClaim:
		c.Walk, c.After = dialects.WalkKeys, p.cursor
	}
	if !p.blind {
		c.Watermark = p.wm.Clone()
		if p.reach.floorsDue(now) {
			a.Floors = &ReadFloors{Settled: p.wm.Settled(), Prev: p.reach.lastFloors()}
		}
		// The gate as it stands: a row it holds back is no straggler yet.
		if b, ok := p.reach.stragglersDue(now); ok {
			a.Stragglers = &LookForStragglers{Gate: p.wm.Gate(), Bounds: b}
		}
	}
	p.saw = mark{p.wm.LastSeen(), p.wm.Settled()}
	a.Claims = append(a.Claims, c)
	return true
}

// slowAfter is how long the claim just started may run before the
// planner probes beside it.
func (p *Planner) slowAfter() time.Duration {
	return max(p.t.SlowClaimAfter, time.Duration(p.t.SlowClaimFactor)*p.typical)
}

func (p *Planner) fired(now time.Time, t Timer, a *Actions) {
	switch t {
	case TimerProbe:
		p.probeAt = time.Time{}
		if p.claiming == 0 && p.mode != Paced {
			p.startProbe(now, a)
		}
	case TimerPoll:
		a.arm(TimerPoll, p.cfg.PollInterval)
		switch {
		case p.mode == Ready || p.mode == Backlog:
			p.claim(now, a)
		case p.mode == Quiet && (p.reach.held || p.blind || !now.Before(p.lastStart.Add(p.t.IdlePoll))):
			// While the horizon is held, walks over the keys and narrow
			// looks come as their cost allows, and a poll finds what they
			// left; a blind claimer cannot probe; and every claimer claims
			// at least every idle poll.
			p.mode = Ready
			p.claim(now, a)
		}
	case TimerDue:
		p.dueAt = time.Time{}
		p.wantClaim(now, a)
	case TimerPace:
		if p.mode == Paced {
			p.mode = Ready
			p.claim(now, a)
		}
	case TimerRetry:
		if p.mode == Failing {
			p.mode = Ready
			p.claim(now, a)
		}
	case TimerSlow:
		// No claim started since the one this was armed for, and one still
		// runs: look beside it, and again after as long while it goes on.
		if p.claiming > 0 && p.claiming < p.statements {
			p.startProbe(now, a)
			a.arm(TimerSlow, p.slowAfter())
		}
	}
}

func (p *Planner) startProbe(now time.Time, a *Actions) {
	if p.probing || p.blind || p.mode == Draining || p.mode == Failing && now.Before(p.retryAt) {
		return
	}
	p.probing = true
	a.Probe = true
}

func (p *Planner) goBlind() {
	p.blind, p.reach.blind = true, true
}

func (p *Planner) probed(now time.Time, e Probed, a *Actions) {
	p.probing = false
	if e.Err != nil {
		p.pace.Probed(p.paceState(now), false)
		if e.Blind {
			p.goBlind()
		} else {
			p.fail(now, a)
		}
		return
	}
	p.wm.Observe(e.Probe, now)
	rewound := p.reach.observe(e.Probe)
	p.probeSaw(now, e.Probe, a)
	news := p.wm.LastSeen() > p.saw.last || p.wm.Settled() > p.saw.settled || rewound
	p.pace.Probed(p.paceState(now), news)
	if news {
		p.lastNews = now
		p.wantClaim(now, a)
	}
}

func (p *Planner) claimDone(now time.Time, e ClaimDone, a *Actions) {
	p.claiming--
	m := e.Claim
	n := len(e.Rows)
	p.free += m.Limit - n
	full := claimFull(e.Rows, m.Limit, m.Heads)
	if e.Probe != nil {
		p.wm.Observe(*e.Probe, now)
		p.reach.observe(*e.Probe)
	}
	if e.Err != nil {
		p.reach.failed(m.plan)
	} else {
		since, _ := p.wm.Waiting()
		if e.Probe != nil {
			m.plan.writerAge = p.reach.writersSeen(e.Probe.Writers, m.plan.sentAt)
		}
		p.reach.claimed(now, m.Kind, m.plan, e.Report, e.Took, since)
		p.reach.took(m.plan, n, full)
	}
	if e.Probe != nil {
		// After the walk's own pacing: a row that comes due brings the
		// next walk forward.
		p.probeSaw(now, *e.Probe, a)
	}
	if e.Err != nil && e.Blind {
		p.goBlind()
		p.claim(now, a)
		return
	}
	if p.mode == Draining {
		return
	}
	if e.Err != nil {
		p.fail(now, a)
		return
	}
	p.failed.Reset()
	// A claim that was not full took what its own probe showed: a later
	// probe that shows the same is no news. A full one may have left rows
	// behind, which stay news until a claim takes them.
	if !full {
		p.saw = p.saw.max(mark{e.Seen, e.Settled})
	}
	if !m.plan.full {
		p.typical = (p.typical*7 + e.Took) / 8
	}
	if e.Cursor != "" {
		p.cursor = e.Cursor
	}
	p.heads.observe(e.Rows, m.Limit, m.run)
	if n > 0 {
		p.lastNews = now
	}
	p.choice.observe(e.Rows)
	p.waitCredit = 0
	if !full && n*2 < m.Limit {
		// Most keys are busy: wait for some of them to finish rather than
		// scan the same busy keys again.
		p.waitCredit = min(p.cfg.BatchSize/max(p.t.WaitCreditShare, 1), p.cfg.MaxInFlight-p.free)
	}
	again := p.again
	p.again = false
	switch {
	case full:
		p.mode = Backlog
	case again || len(p.reach.continuing) > 0 || m.Kind == byKeyClaim && p.reach.keysWait():
		// News came while it ran, keys to continue came back meanwhile, or
		// the last walk over the keys left keys waiting.
		p.mode = Ready
	default:
		p.mode = Quiet
	}
	if p.mode != Quiet {
		p.claim(now, a)
	}
}

// fail makes the planner Failing after a claim or a probe that the database
// refused: claims and probes wait for a back-off, so that an outage is not
// hammered, then a claim finds out whether it is over. What led to the
// statement is news to the claim after it.
func (p *Planner) fail(now time.Time, a *Actions) {
	p.saw = mark{-1, -1}
	if p.mode == Draining {
		return
	}
	p.mode = Failing
	wait := p.failed.Next()
	p.retryAt = now.Add(wait)
	a.arm(TimerRetry, wait)
}

func (p *Planner) credit(now time.Time, e Credit, a *Actions) {
	p.free += e.N
	if p.mode == Draining {
		return
	}
	p.reach.continued(e.Continued)
	if e.RetryIn > 0 {
		p.dueIn(now, e.RetryIn, a)
	}
	p.waitCredit -= e.N
	if p.mode == Quiet && (e.Successors || e.Released || len(p.reach.continuing) > 0 || p.reach.keysWait()) {
		p.mode = Ready
	}
	if (p.mode == Ready || p.mode == Backlog) && (p.waitCredit <= 0 || len(p.reach.continuing) >= p.threshold()) {
		p.claim(now, a)
	}
}

func (p *Planner) paceState(now time.Time) PaceState {
	return PaceState{
		Listening: p.listening,
		Active:    p.free < p.cfg.MaxInFlight || now.Sub(p.lastNews) <= p.t.IdleAfter,
		Waiting:   p.wm.LastSeen() > p.wm.Settled() || now.Sub(p.listenedAt) <= p.t.IdleAfter,
	}
}

// repace arms the probe timer: none while a claim runs (each probes by
// itself) or while paced, blind, failing or draining; otherwise at the
// pace's interval, unless one is armed sooner.
func (p *Planner) repace(now time.Time, a *Actions) {
	if !p.started || p.claiming > 0 || p.probing || p.blind || p.mode == Paced || p.mode == Draining || p.mode == Failing {
		if !p.probeAt.IsZero() && (p.claiming > 0 || p.mode == Draining) {
			p.probeAt = time.Time{}
			a.arm(TimerProbe, -1)
		}
		return
	}
	at := now.Add(p.pace.Interval(p.paceState(now)))
	if p.probeAt.IsZero() || at.Before(p.probeAt) {
		p.probeAt = at
		a.arm(TimerProbe, at.Sub(now))
	}
}

// Mode is the planner's mode.
func (p *Planner) Mode() Mode { return p.mode }

// Idle reports whether the claimer probes at its idle pace (for the
// metrics).
func (p *Planner) Idle(now time.Time) bool { return p.pace.Idle(p.paceState(now)) }

// Claiming is how many claims run.
func (p *Planner) Claiming() int { return p.claiming }

// Drained reports whether a draining planner has every outcome written and
// no claim running.
func (p *Planner) Drained() bool {
	return p.mode == Draining && p.free == p.cfg.MaxInFlight && p.claiming == 0
}

// Blind reports whether the database refused to show other transactions.
func (p *Planner) Blind() bool { return p.blind }

// Watermark is the gate's watermark, for the claimer's log of writers that
// hold rows back (it must not change it).
func (p *Planner) Watermark() *dialects.Watermark { return &p.wm }

// Seen is the newest sequence a probe has seen.
func (p *Planner) Seen() int64 { return p.wm.LastSeen() }

// Held reports whether claims behave as under a long transaction.
func (p *Planner) Held() bool { return p.reach.held }

// Failures is how many claims in a row the database refused.
func (p *Planner) Failures() int { return p.failed.Failures() }
