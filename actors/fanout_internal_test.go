package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

func fanRoute(t *testing.T, name, pattern string, dests ...string) routing.Route {
	t.Helper()
	p, err := routing.CompilePattern(pattern)
	if err != nil {
		t.Fatal(err)
	}
	r := routing.Route{Name: name, Pattern: p, Destination: dests[0]}
	if len(dests) > 1 {
		r.Destinations = dests
	}
	return r
}

func claimOf(n int) dialects.Claim {
	return dialects.Claim{ID: uuid.NewSHA1(uuid.Nil, []byte(fmt.Sprint(n))), Token: uuid.NewSHA1(uuid.Nil, []byte("token"))}
}

// The units of a fan-out row end as one outcome: delivered, with a copy
// for each destination whose delivery did not end well; released when no
// unit was tried and one was released; nothing when the claim was lost;
// dead when the row itself cannot be delivered.
func TestUnitsEndAsOneOutcomeWithTheirCopies(t *testing.T) {
	a := dialects.Attempt{Destination: "b", Try: 1, Error: "503"}
	delivered := func(c dialects.Claim, d string) unitEnd {
		return unitEnd{claim: c, end: unitDelivered, copy: dialects.Copy{Destination: d}}
	}
	copied := func(c dialects.Claim, cp dialects.Copy, att *dialects.Attempt) unitEnd {
		return unitEnd{claim: c, end: unitCopied, copy: cp, attempt: att}
	}
	released := func(c dialects.Claim, d string) unitEnd {
		return unitEnd{claim: c, end: unitReleased, copy: dialects.Copy{Destination: d, Kind: dialects.CopyBehind}}
	}
	retry := dialects.Copy{Destination: "b", Kind: dialects.CopyRetry, Attempt: 1, Delay: time.Second, Error: "503"}
	held := dialects.Copy{Destination: "c", Kind: dialects.CopyDefer, Delay: 2 * time.Second}
	for _, tc := range []struct {
		name   string
		ends   func(c dialects.Claim) []unitEnd
		want   dialects.OutcomeKind // 0: nothing written
		copies []dialects.Copy
		tried  int
	}{
		{"every destination took it", func(c dialects.Claim) []unitEnd {
			return []unitEnd{delivered(c, "a"), delivered(c, "b"), delivered(c, "c")}
		}, dialects.OutcomeDelivered, nil, 0},
		{"one failed, one was held", func(c dialects.Claim) []unitEnd {
			return []unitEnd{delivered(c, "a"), copied(c, retry, &a), copied(c, held, nil)}
		}, dialects.OutcomeDelivered, []dialects.Copy{retry, held}, 1},
		{"one released behind its lane", func(c dialects.Claim) []unitEnd {
			return []unitEnd{delivered(c, "a"), released(c, "b"), delivered(c, "c")}
		}, dialects.OutcomeDelivered, []dialects.Copy{{Destination: "b", Kind: dialects.CopyBehind}}, 0},
		{"every unit released untouched", func(c dialects.Claim) []unitEnd {
			return []unitEnd{released(c, "a"), released(c, "b"), released(c, "c")}
		}, dialects.OutcomeRelease, nil, 0},
		{"the claim was lost", func(c dialects.Claim) []unitEnd {
			return []unitEnd{delivered(c, "a"), {claim: c, end: unitLost}, released(c, "c")}
		}, 0, nil, 0},
		{"the payload is not JSON", func(c dialects.Claim) []unitEnd {
			dead := unitEnd{claim: c, end: unitRowDead, copy: dialects.Copy{Error: "the payload is not valid JSON"}}
			return []unitEnd{dead, dead, dead}
		}, dialects.OutcomeDead, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fi := newFanIn()
			c := claimOf(1)
			var out fanOut
			fi.add([]*fanRow{{claim: c, waiting: 3}}, &out)
			fi.end(tc.ends(c), &out)
			if tc.want == 0 {
				if len(out.outcomes) != 0 || !slices.Equal(out.abandons, []dialects.Claim{c}) {
					t.Fatalf("want the claim abandoned, got %+v", out)
				}
				return
			}
			if len(out.outcomes) != 1 || len(out.abandons) != 0 {
				t.Fatalf("want one outcome, got %+v", out)
			}
			o := out.outcomes[0]
			if o.Kind != tc.want || o.Claim != c || !slices.Equal(o.Copies, tc.copies) || len(o.Attempts) != tc.tried {
				t.Fatalf("got %s with copies %+v and %d attempts; want %s with %+v and %d", o.Kind, o.Copies, len(o.Attempts), tc.want, tc.copies, tc.tried)
			}
			if tc.want == dialects.OutcomeDead && o.Error == "" {
				t.Fatal("a dead row without its reason")
			}
			if len(fi.rows) != 0 || len(fi.keys) != 0 {
				t.Fatal("the row is still followed after its outcome")
			}
		})
	}
}

// A row's outcome waits for the earlier rows of its key, so that the key's
// rows are written in sequence order; unkeyed rows and other keys do not
// wait.
func TestARowsOutcomeWaitsForTheEarlierRowsOfItsKey(t *testing.T) {
	fi := newFanIn()
	var out fanOut
	r1, r2, r3, other, unkeyed := claimOf(1), claimOf(2), claimOf(3), claimOf(4), claimOf(5)
	fi.add([]*fanRow{{claim: r1, key: "k", seq: 1, waiting: 2}, {claim: r2, key: "k", seq: 2, waiting: 2}, {claim: r3, key: "k", seq: 3, waiting: 2},
		{claim: other, key: "j", seq: 4, waiting: 1}, {claim: unkeyed, seq: 5, waiting: 1}}, &out)
	ids := func() []uuid.UUID {
		var s []uuid.UUID
		for _, o := range out.outcomes {
			s = append(s, o.ID)
		}
		return s
	}
	d := func(c dialects.Claim, dest string) unitEnd {
		return unitEnd{claim: c, end: unitDelivered, copy: dialects.Copy{Destination: dest}}
	}
	fi.end([]unitEnd{d(r2, "a"), d(r2, "b"), d(r3, "a"), d(other, "a"), d(unkeyed, "a")}, &out)
	if got := ids(); !slices.Equal(got, []uuid.UUID{other.ID, unkeyed.ID}) {
		t.Fatalf("before the key's first row ended: %v", got)
	}
	fi.end([]unitEnd{d(r1, "a")}, &out)
	if len(out.outcomes) != 2 {
		t.Fatal("a row came out before all its units ended")
	}
	fi.end([]unitEnd{d(r1, "b")}, &out)
	if got := ids(); !slices.Equal(got[2:], []uuid.UUID{r1.ID, r2.ID}) {
		t.Fatalf("want r1 then r2 once r1 ended, got %v", got[2:])
	}
	fi.end([]unitEnd{d(r3, "b")}, &out)
	if got := ids(); len(got) != 5 || got[4] != r3.ID {
		t.Fatalf("r3 did not come out last: %v", got)
	}
	if len(fi.keys) != 0 || len(fi.rows) != 0 || len(fi.runs) != 0 {
		t.Fatal("rows still followed")
	}
	// Both keys' rows ended well: the claimer hears where each stands.
	var pos []string
	for _, c := range out.continued {
		pos = append(pos, fmt.Sprintf("%s@%d", c.pos.Key, c.pos.After))
	}
	if !slices.Equal(pos, []string{"j@4", "k@3"}) {
		t.Fatalf("continuations %v, want j@4 and k@3", pos)
	}
}

// Rows of a key whose every lane is blocked have ended when they are
// claimed: they come out at once, in order, each once.
func TestRowsWhoseLanesAreAllBlockedComeOutAtOnce(t *testing.T) {
	fi := newFanIn()
	var out fanOut
	behind := []dialects.Copy{{Destination: "a", Kind: dialects.CopyBehind}}
	r1, r2, r3 := claimOf(1), claimOf(2), claimOf(3)
	fi.add([]*fanRow{{claim: r1, key: "k", seq: 1, copies: behind}, {claim: r2, key: "k", seq: 2, copies: behind},
		{claim: r3, key: "j", seq: 3, copies: behind}}, &out)
	if len(out.outcomes) != 3 || out.outcomes[0].ID != r1.ID || out.outcomes[1].ID != r2.ID || out.outcomes[2].ID != r3.ID {
		t.Fatalf("got %+v", out.outcomes)
	}
	for _, o := range out.outcomes {
		if o.Kind != dialects.OutcomeDelivered || len(o.Copies) != 1 {
			t.Fatalf("got %+v", o)
		}
	}
}

// A key whose fan-out rows did not all end well (one was released, or its
// claim lost) tells the claimer nothing: its next head is found by walks.
func TestAKeyWhoseRowWasReleasedTellsNoPosition(t *testing.T) {
	for _, end := range []unitEndKind{unitReleased, unitLost} {
		fi := newFanIn()
		var out fanOut
		r1, r2 := claimOf(1), claimOf(2)
		fi.add([]*fanRow{{claim: r1, key: "k", seq: 1, waiting: 1}, {claim: r2, key: "k", seq: 2, waiting: 1}}, &out)
		fi.end([]unitEnd{{claim: r1, end: unitDelivered}, {claim: r2, end: end}}, &out)
		if len(out.outcomes)+len(out.abandons) != 2 || len(out.continued) != 0 {
			t.Errorf("after a unit %d: %+v", end, out)
		}
	}
}

// A key whose fan-out row was delivered with a copy tells the claimer
// nothing either: a claim that continued the key could take its next row
// before the copy commits, and that row's pass would not see the lane the
// copy blocks.
func TestAKeyWhoseRowLeftACopyTellsNoPosition(t *testing.T) {
	fi := newFanIn()
	var out fanOut
	r1, r2 := claimOf(1), claimOf(2)
	fi.add([]*fanRow{{claim: r1, key: "k", seq: 1, waiting: 2}, {claim: r2, key: "k", seq: 2, waiting: 2}}, &out)
	fi.end([]unitEnd{{claim: r1, end: unitDelivered}, {claim: r1, end: unitCopied, copy: dialects.Copy{Destination: "b", Kind: dialects.CopyRetry, Attempt: 1}},
		{claim: r2, end: unitDelivered}, {claim: r2, end: unitDelivered}}, &out)
	if len(out.outcomes) != 2 || len(out.outcomes[0].Copies) != 1 || len(out.continued) != 0 {
		t.Errorf("got %+v", out)
	}
}

func testDeliverer(t *testing.T, routes []routing.Route, handles map[string]*destctl.Handle, c clock.Clock) *deliverer {
	router := routing.NewRouter(routes)
	return &deliverer{router: router, sinks: handles, routes: newRouteObservers(router, NopObserver{}), clock: c,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), stats: &Stats{}, obs: NopObserver{},
		policy: outcomePolicy{backoff: Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute}, maxErrorBytes: 2048}}
}

// A claim's rows split into the runs of the actors that deliver them: a
// key with a fan-out row travels in lanes (its single-destination rows
// too, so that each destination keeps the key's order), a blocked lane's
// units are copies behind at once, other keys go to their key actor and
// unkeyed fan-out rows to the pool, a unit per destination.
func TestAClaimSplitsIntoLanes(t *testing.T) {
	d := testDeliverer(t, []routing.Route{fanRoute(t, "orders", "order.#", "a", "b", "c"), fanRoute(t, "audit", "#", "a")}, nil, clock.Wall{})
	l := upkeep.NewLease(uuid.New(), 0)
	row := func(n int, topic, key string) dialects.Row {
		return dialects.Row{Claim: claimOf(n), Topic: topic, Key: key, Sequence: int64(n)}
	}
	rows := []dialects.Row{row(1, "order.created", ""), row(2, "audit.x", ""),
		row(3, "order.created", "k"), row(4, "audit.x", "k"), row(5, "order.paid", "k"),
		row(6, "audit.x", "plain")}
	runs, fans := d.splitClaim(rows, l, []dialects.Lane{{Destination: "b", Key: "k"}})
	got := map[dialects.Lane][]string{}
	for _, r := range runs {
		for _, c := range r.run {
			dest := "-"
			if c.unit != nil {
				dest = c.unit.dest
			}
			got[r.lane] = append(got[r.lane], fmt.Sprintf("%d%s", c.Sequence, dest))
		}
	}
	want := map[dialects.Lane][]string{
		{}:                           {"2-", "1a", "1b", "1c"},
		{Destination: "a", Key: "k"}: {"3a", "4a", "5a"},
		{Destination: "c", Key: "k"}: {"3c", "5c"},
		{Key: "plain"}:               {"6-"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs:\n got %v\nwant %v", got, want)
	}
	if len(fans) != 4 {
		t.Fatalf("want 4 fan-out rows (1, 3, 4, 5), got %d", len(fans))
	}
	for _, f := range fans {
		switch f.claim {
		case claimOf(1):
			if f.waiting != 3 || f.key != "" {
				t.Errorf("row 1: %+v", f)
			}
		case claimOf(3), claimOf(5):
			if f.waiting != 2 || len(f.copies) != 1 || f.copies[0].Kind != dialects.CopyBehind || f.copies[0].Destination != "b" {
				t.Errorf("row %d: want 2 units and b behind, got %+v", f.claim.ID, f)
			}
		case claimOf(4):
			if f.waiting != 1 || len(f.copies) != 0 {
				t.Errorf("row 4: %+v", f)
			}
		}
	}
}

// fakeSink answers each message with what fail says.
type fakeSink struct {
	mu   sync.Mutex
	got  []string
	fail func(m sinks.Message) error
}

func (s *fakeSink) Publish(_ context.Context, msgs []sinks.Message) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if s.fail != nil {
			errs[i] = s.fail(m)
		}
		if errs[i] == nil {
			s.got = append(s.got, m.Key+"/"+string(m.Body))
		}
	}
	return errs
}

func (s *fakeSink) Close() error { return nil }

func (s *fakeSink) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// capturingRelay writes outcomes to memory.
type capturingRelay struct {
	dialects.Relay
	mu  sync.Mutex
	out []dialects.Outcome
}

func (r *capturingRelay) OutboxComplete(_ context.Context, out []dialects.Outcome) ([]dialects.Claim, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out = append(r.out, out...)
	return nil, nil
}

func (r *capturingRelay) OutboxRewind(context.Context) error { return nil }

func (r *capturingRelay) written() []dialects.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.out)
}

// The units of a claim travel through the lanes' key actors and the
// completer, on the fake clock, as the claimer hands them out: a
// destination that fails stops its own lane only (the rows behind become
// copies behind), the others receive every row in key order, and each row
// is written once, in key order, with its copies.
func TestUnitsTravelTheirLanesAndEndAsOneOutcomePerRow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	handles := map[string]*destctl.Handle{}
	sinksOf := map[string]*fakeSink{}
	for _, name := range []string{"a", "b", "c"} {
		handles[name] = destctl.NewHandle(name, destctl.Policy{}, 100, clk)
		sinksOf[name] = &fakeSink{}
		handles[name].Set(sinksOf[name])
	}
	sinksOf["b"].fail = func(m sinks.Message) error {
		if strings.Contains(string(m.Body), `"n":2`) {
			return errors.New("503 from b")
		}
		return nil
	}
	sinksOf["c"].fail = func(m sinks.Message) error {
		if strings.Contains(string(m.Body), `"n":3`) {
			return sinks.Permanent(errors.New("400 from c"))
		}
		return nil
	}
	d := testDeliverer(t, []routing.Route{fanRoute(t, "orders", "#", "a", "b", "c")}, handles, clk)
	d.ctx = context.Background()

	system := actor.NewActorSystem()
	defer system.Shutdown()
	root := system.Root
	nobody := root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	relay := &capturingRelay{}
	completerPID := root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &completer{dialect: relay, claimer: nobody, leaseKeeper: nobody, bg: context.Background(), log: d.log, stats: d.stats,
			obs: NopObserver{}, clock: clk, statements: 1, fan: newFanIn()}
	}))
	d.completer = completerPID

	l := upkeep.NewLease(uuid.New(), 0)
	l.Extend(clk.Now(), time.Minute)
	var rows []dialects.Row
	for n := 1; n <= 4; n++ {
		rows = append(rows, dialects.Row{Claim: claimOf(n), Topic: "order.created", Key: "k", Sequence: int64(n), MaxAttempts: 5,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)), TypedJSON: true, CreatedAt: clk.Now()})
	}
	runs, fans := d.splitClaim(rows, l, nil)
	root.Send(completerPID, &fanClaimed{rows: fans})
	for _, r := range runs {
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return newKeyActor(d, r.lane, nobody, time.Hour, clk) }))
		root.Send(pid, &deliverRun{rows: r.run})
	}

	testkit.Eventually(t, "four outcomes", 10*time.Second, func() error {
		if n := len(relay.written()); n < 4 {
			return fmt.Errorf("%d written", n)
		}
		return nil
	})
	body := func(n int) string { return fmt.Sprintf(`k/{"n":%d}`, n) }
	if got, want := sinksOf["a"].received(), []string{body(1), body(2), body(3), body(4)}; !slices.Equal(got, want) {
		t.Errorf("a received %v, want %v", got, want)
	}
	if got, want := sinksOf["b"].received(), []string{body(1)}; !slices.Equal(got, want) {
		t.Errorf("b received %v, want %v (its lane stops at the failure)", got, want)
	}
	if got, want := sinksOf["c"].received(), []string{body(1), body(2), body(4)}; !slices.Equal(got, want) {
		t.Errorf("c received %v, want %v (a dead delivery does not stop its lane)", got, want)
	}
	out := relay.written()
	want := []string{
		"delivered []",
		"delivered [b retry 1 503 from b]",
		"delivered [b behind 0  c dead 0 400 from c]",
		"delivered [b behind 0 ]",
	}
	kinds := map[dialects.CopyKind]string{dialects.CopyRetry: "retry", dialects.CopyDefer: "defer", dialects.CopyBehind: "behind", dialects.CopyDead: "dead"}
	for i, o := range out {
		if o.ID != rows[i].ID {
			t.Fatalf("outcome %d is row %v's: not in key order", i, o.ID)
		}
		slices.SortFunc(o.Copies, func(x, y dialects.Copy) int { return strings.Compare(x.Destination, y.Destination) })
		var cs []string
		for _, c := range o.Copies {
			cs = append(cs, fmt.Sprintf("%s %s %d %s", c.Destination, kinds[c.Kind], c.Attempt, c.Error))
		}
		if got := fmt.Sprintf("%s [%s]", o.Kind, strings.Join(cs, " ")); got != want[i] {
			t.Errorf("row %d: got %s, want %s", i+1, got, want[i])
		}
	}
}

// A copy's message is its row's, with the row's id, through the transform
// of the route that matches its topic now; a copy whose destination is no
// longer configured cannot be delivered, and says so.
func TestACopyIsPreparedForItsOwnDestination(t *testing.T) {
	rt := fanRoute(t, "orders", "order.#", "a", "b")
	tr, err := routing.CompileTransform(`{wrapped: ., id: $id}`)
	if err != nil {
		t.Fatal(err)
	}
	rt.Transform = tr
	handles := map[string]*destctl.Handle{"a": destctl.NewHandle("a", destctl.Policy{}, 10, clock.Wall{}), "b": destctl.NewHandle("b", destctl.Policy{}, 10, clock.Wall{})}
	d := testDeliverer(t, []routing.Route{rt}, handles, clock.Wall{})
	rowID := uuid.New()
	copyRow := dialects.Row{Claim: claimOf(1), Topic: "order.created", Key: "k", Payload: []byte(`{"n":1}`), TypedJSON: true,
		Attempt: 2, MaxAttempts: 5, CopyOf: &dialects.CopyOf{RowID: rowID, Destination: "b"}}
	p := d.prepare(copyRow)
	if p.dead != nil || p.retry != nil || p.dest != handles["b"] {
		t.Fatalf("prepared %+v", p)
	}
	if want := fmt.Sprintf(`{"id":%q,"wrapped":{"n":1}}`, rowID); p.msg.ID != rowID.String() || string(p.msg.Body) != want || p.msg.Attempt != 2 {
		t.Fatalf("message id %s, body %s, attempt %d; want the row's id %s, body %s, attempt 2", p.msg.ID, p.msg.Body, p.msg.Attempt, rowID, want)
	}
	copyRow.CopyOf.Destination = "gone"
	if p := d.prepare(copyRow); p.dead == nil || !strings.Contains(p.dead.Error(), `"gone", which no longer exists`) {
		t.Fatalf("a copy to a destination no longer configured: %v", p.dead)
	}
}

// copiesHeard is an Observer that hears copies.
type copiesHeard struct {
	NopObserver
	heard []string
}

func (c *copiesHeard) CopiesWritten(dest string, kind dialects.CopyKind, n int) {
	c.heard = append(c.heard, fmt.Sprintf("%s/%d/%d", dest, kind, n))
}

// The completer tells an Observer that hears copies of each copy it wrote
// (not of those whose rows' claims were lost), and the copies path when
// the first to deliver comes due.
func TestTheCopiesWrittenAreHeard(t *testing.T) {
	obs := &copiesHeard{}
	c := &completer{obs: obs}
	kept, lost := claimOf(1), claimOf(2)
	out := []dialects.Outcome{
		{Claim: kept, Kind: dialects.OutcomeDelivered, Copies: []dialects.Copy{{Destination: "b", Kind: dialects.CopyRetry, Delay: 3 * time.Second},
			{Destination: "c", Kind: dialects.CopyDead}, {Destination: "d", Kind: dialects.CopyDefer, Delay: 2 * time.Second}}},
		{Claim: lost, Kind: dialects.OutcomeDelivered, Copies: []dialects.Copy{{Destination: "b", Kind: dialects.CopyBehind}}},
		{Claim: claimOf(3), Kind: dialects.OutcomeDelivered},
	}
	in, ok := c.copiesWritten(out, []dialects.Claim{lost})
	if !ok || in != 2*time.Second {
		t.Fatalf("first copy due in %s (%v), want 2s", in, ok)
	}
	if want := []string{"b/1/1", "c/4/1", "d/2/1"}; !slices.Equal(obs.heard, want) {
		t.Fatalf("heard %v, want %v", obs.heard, want)
	}
	if _, ok := c.copiesWritten(out[2:], nil); ok {
		t.Fatal("copies heard of where none were written")
	}
}
