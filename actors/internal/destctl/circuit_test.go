package destctl

import (
	"bytes"
	"errors"
	"github.com/queuebox/queuebox/internal/clock"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

func dialectsState(name string, paused bool) dialects.DestinationState {
	return dialects.DestinationState{Name: name, Paused: paused}
}

// The circuit opens only when every attempt failed for the window, with at
// least the minimum of attempts; then one probe at a time, one per
// interval; a success closes it. Times are since the handle's origin, as the
// delivery path gives them.
func TestCircuitOpensAfterAWindowOfFailuresAndProbes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	h := NewHandle("hook", Policy{CircuitBreaker: CircuitBreaker{Window: time.Second, MinAttempts: 3, ProbeInterval: 500 * time.Millisecond}}, 100, clock.Wall{})
	down, up := []error{errors.New("HTTP 503")}, []error{nil}
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return h.origin.Add(d) }

	h.NoteHealth(down, 0, 10*ms, false, log)
	h.NoteHealth(down, 20*ms, 30*ms, false, log)
	h.NoteHealth(down, 1200*ms, 1210*ms, false, log) // three attempts, but one began after the window: enough
	if !h.health.isOpen() {
		t.Fatalf("three failed attempts over more than the window did not open the circuit:\n%s", buf.String())
	}
	// Open: deliveries are held, but the first after the interval is the
	// probe, alone until it ends.
	if a := h.Admit(at(1300*ms), 1, 0); a.Held != HeldCircuit || a.Delay < 800*ms {
		t.Fatalf("before the probe interval: %+v", a)
	}
	probe := h.Admit(at(1710*ms), 1, 0)
	if probe.Held != NotHeld || !probe.Probe {
		t.Fatalf("after the probe interval: %+v, want the probe", probe)
	}
	if a := h.Admit(at(5000*ms), 1, 0); a.Held != HeldCircuit {
		t.Fatalf("a second probe while the first is under way: %+v", a)
	}
	h.NoteHealth(down, 1710*ms, 1720*ms, true, log) // the probe failed
	if a := h.Admit(at(1800*ms), 1, 0); a.Held != HeldCircuit {
		t.Fatalf("a probe within the interval of the last: %+v", a)
	}
	if a := h.Admit(at(2300*ms), 1, 0); !a.Probe {
		t.Fatalf("no probe an interval after the last: %+v", a)
	}
	// A success that began before the failures is old news.
	h.NoteHealth(up, 5*ms, 2350*ms, false, log)
	if !h.health.isOpen() {
		t.Fatal("a success sent before the outage closed the circuit")
	}
	h.NoteHealth(up, 2300*ms, 2310*ms, true, log) // the probe succeeded
	if h.health.isOpen() {
		t.Fatal("a successful probe did not close the circuit")
	}
	if a := h.Admit(at(2320*ms), 1, 0); a.Held != NotHeld || a.Probe {
		t.Fatalf("after the circuit closed: %+v", a)
	}
	v := h.health.view()
	if v.opened != 1 || v.probes != 2 {
		t.Errorf("opened %d times, %d probes; want 1 and 2", v.opened, v.probes)
	}
	if strings.Count(buf.String(), "circuit open") != 1 || strings.Count(buf.String(), "circuit closed") != 1 {
		t.Errorf("want one line for the opening and one for the closing:\n%s", buf.String())
	}
}

// Too few attempts, a success inside the window, or failures that are the
// rows' own fault keep it closed; a zero window turns the breaker off.
func TestCircuitStaysClosed(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ms := time.Millisecond
	cb := CircuitBreaker{Window: 100 * ms, MinAttempts: 3, ProbeInterval: time.Second}
	down, up := []error{errors.New("HTTP 503")}, []error{nil}

	few := NewHandle("a", Policy{CircuitBreaker: cb}, 100, clock.Wall{})
	few.NoteHealth(down, 0, ms, false, log)
	few.NoteHealth(down, 500*ms, 501*ms, false, log)
	if few.health.isOpen() {
		t.Error("two attempts opened a circuit that needs three")
	}

	broken := NewHandle("b", Policy{CircuitBreaker: cb}, 100, clock.Wall{})
	broken.NoteHealth(down, 0, ms, false, log)
	broken.NoteHealth(down, 10*ms, 11*ms, false, log)
	broken.NoteHealth(up, 50*ms, 51*ms, false, log)
	broken.NoteHealth(down, 60*ms, 61*ms, false, log)
	broken.NoteHealth(down, 150*ms, 151*ms, false, log)
	if broken.health.isOpen() {
		t.Error("the failures before a success counted towards the window")
	}
	broken.NoteHealth(down, 170*ms, 171*ms, false, log)
	if !broken.health.isOpen() {
		t.Error("three failures over the window since the last success did not open it")
	}

	permanent := NewHandle("c", Policy{CircuitBreaker: cb}, 100, clock.Wall{})
	bad := []error{sinks.Permanent(errors.New("HTTP 400"))}
	for i := range 10 {
		permanent.NoteHealth(bad, time.Duration(i)*100*ms, time.Duration(i)*100*ms+ms, false, log)
	}
	if permanent.health.isOpen() {
		t.Error("rows refused for their own fault opened the circuit")
	}

	off := NewHandle("d", Policy{}, 100, clock.Wall{})
	for i := range 10 {
		off.NoteHealth(down, time.Duration(i)*time.Second, time.Duration(i)*time.Second+ms, false, log)
	}
	if off.health.isOpen() {
		t.Error("a destination without a breaker opened its circuit")
	}
}

// A paused destination holds its rows with a delay that grows with the
// pause, up to maxHoldDelay.
func TestHoldDelays(t *testing.T) {
	h := NewHandle("a", Policy{}, 100, clock.Wall{})
	now := time.Now()
	if a := h.Admit(now, 1, 0); a.Held != NotHeld {
		t.Fatalf("not paused: %+v", a)
	}
	h.hold.set("", dialectsState("a", true), now)
	for _, c := range []struct{ after, lo, hi time.Duration }{
		{0, 800 * time.Millisecond, 1200 * time.Millisecond},
		{10 * time.Second, 8 * time.Second, 12 * time.Second},
		{time.Hour, 24 * time.Second, 36 * time.Second},
	} {
		a := h.Admit(now.Add(c.after), 1, 0)
		if a.Held != HeldPaused || a.Delay < c.lo || a.Delay > c.hi {
			t.Errorf("paused for %v: %+v, want a delay from %v to %v", c.after, a, c.lo, c.hi)
		}
	}
}

// The breaker calls a destination down once every attempt since the latest
// success failed, at least MinAttempts of them, before the window opens the
// circuit; a success ends that. While the circuit is open, a row whose
// failure is not counted waits as long as the circuit holds rows.
func TestBreakerViewOfAFailure(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ms := time.Millisecond
	h := NewHandle("hook", Policy{CircuitBreaker: CircuitBreaker{Window: time.Second, MinAttempts: 3, ProbeInterval: time.Second}}, 100, clock.Wall{})
	down, up := []error{errors.New("HTTP 503")}, []error{nil}
	now := time.Now()
	h.NoteHealth(down, 0, ms, false, log)
	h.NoteHealth(down, 10*ms, 11*ms, false, log)
	if b := h.BreakerView(false, now); b.Down {
		t.Fatalf("two failures of the three the breaker needs: %+v", b)
	}
	h.NoteHealth(down, 20*ms, 21*ms, false, log)
	if b := h.BreakerView(false, now); !b.Down || b.Wait != 0 || b.Probe || h.health.isOpen() {
		t.Fatalf("three failures within the window: %+v, want down with the circuit not open yet", b)
	}
	h.NoteHealth(up, 30*ms, 31*ms, false, log)
	if b := h.BreakerView(false, now); b.Down {
		t.Fatalf("after a success: %+v", b)
	}
	for i := range 4 {
		at := time.Duration(100+400*i) * ms
		h.NoteHealth(down, at, at+ms, false, log)
	}
	if !h.health.isOpen() {
		t.Fatal("four failures over more than the window did not open the circuit")
	}
	b := h.BreakerView(true, h.health.view().openedAt.Add(10*time.Second))
	if !b.Down || !b.Probe || b.Wait < 8*time.Second || b.Wait > 12*time.Second {
		t.Fatalf("a probe that failed 10 s after the circuit opened: %+v, want down and a wait of about 10 s", b)
	}
	if b := NewHandle("off", Policy{}, 100, clock.Wall{}).BreakerView(true, now); b != (BreakerView{}) {
		t.Fatalf("without a breaker: %+v, want every failure counted", b)
	}
	// A breaker that needs one failed attempt still does not call the
	// destination down for one: it may be the row's own.
	one := NewHandle("one", Policy{CircuitBreaker: CircuitBreaker{Window: time.Hour, MinAttempts: 1, ProbeInterval: time.Second}}, 100, clock.Wall{})
	one.NoteHealth(down, 0, ms, false, log)
	if b := one.BreakerView(false, now); b.Down {
		t.Fatalf("one failure with minAttempts 1: %+v", b)
	}
	one.NoteHealth(down, 10*ms, 11*ms, false, log)
	if b := one.BreakerView(false, now); !b.Down {
		t.Fatalf("two failures with minAttempts 1: %+v, want down", b)
	}
}

// A destination that engines share is held while any of their watches read
// it paused, and a watch whose engine stopped holds it no longer.
func TestHoldOfSharedHandles(t *testing.T) {
	var h hold
	now := time.Now()
	if !h.set("a", dialectsState("d", true), now) || h.reason() != HeldPaused {
		t.Fatal("a pause read by a does not hold")
	}
	if h.set("b", dialectsState("d", false), now) || h.reason() != HeldPaused {
		t.Error("b reading no pause released a's")
	}
	h.set("b", dialectsState("d", true), now)
	if h.set("a", dialectsState("d", false), now) || h.reason() != HeldPaused {
		t.Error("a's resume released the pause b still reads")
	}
	h.forget("b")
	if h.reason() != NotHeld {
		t.Error("a stopped watch still holds the destination")
	}
	// A watch whose database stopped answering steps aside while another
	// watch reads the destination; alone, it keeps its last word.
	h.set("b", dialectsState("d", true), now)
	h.stepAside("b")
	if h.reason() != NotHeld {
		t.Error("the pause of a watch that stepped aside still holds beside a that reads none")
	}
	h.set("b", dialectsState("d", true), now)
	if h.reason() != HeldPaused {
		t.Error("the next read of b does not count again")
	}
	var alone hold
	alone.set("a", dialectsState("d", true), now)
	alone.stepAside("a")
	if alone.reason() != HeldPaused {
		t.Error("a watch alone dropped its last word")
	}
}
