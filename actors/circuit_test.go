package actors

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
	h := newSinkHandle("hook", DestinationPolicy{CircuitBreaker: CircuitBreaker{Window: time.Second, MinAttempts: 3, ProbeInterval: 500 * time.Millisecond}}, 100, clock.Wall{})
	down, up := []error{errors.New("HTTP 503")}, []error{nil}
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return h.origin.Add(d) }

	h.noteHealth(down, 0, 10*ms, false, log)
	h.noteHealth(down, 20*ms, 30*ms, false, log)
	h.noteHealth(down, 1200*ms, 1210*ms, false, log) // three attempts, but one began after the window: enough
	if !h.health.isOpen() {
		t.Fatalf("three failed attempts over more than the window did not open the circuit:\n%s", buf.String())
	}
	// Open: deliveries are held, but the first after the interval is the
	// probe, alone until it ends.
	if a := h.admit(at(1300*ms), 1, 0); a.held != heldCircuit || a.delay < 800*ms {
		t.Fatalf("before the probe interval: %+v", a)
	}
	probe := h.admit(at(1710*ms), 1, 0)
	if probe.held != notHeld || !probe.probe {
		t.Fatalf("after the probe interval: %+v, want the probe", probe)
	}
	if a := h.admit(at(5000*ms), 1, 0); a.held != heldCircuit {
		t.Fatalf("a second probe while the first is under way: %+v", a)
	}
	h.noteHealth(down, 1710*ms, 1720*ms, true, log) // the probe failed
	if a := h.admit(at(1800*ms), 1, 0); a.held != heldCircuit {
		t.Fatalf("a probe within the interval of the last: %+v", a)
	}
	if a := h.admit(at(2300*ms), 1, 0); !a.probe {
		t.Fatalf("no probe an interval after the last: %+v", a)
	}
	// A success that began before the failures is old news.
	h.noteHealth(up, 5*ms, 2350*ms, false, log)
	if !h.health.isOpen() {
		t.Fatal("a success sent before the outage closed the circuit")
	}
	h.noteHealth(up, 2300*ms, 2310*ms, true, log) // the probe succeeded
	if h.health.isOpen() {
		t.Fatal("a successful probe did not close the circuit")
	}
	if a := h.admit(at(2320*ms), 1, 0); a.held != notHeld || a.probe {
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

	few := newSinkHandle("a", DestinationPolicy{CircuitBreaker: cb}, 100, clock.Wall{})
	few.noteHealth(down, 0, ms, false, log)
	few.noteHealth(down, 500*ms, 501*ms, false, log)
	if few.health.isOpen() {
		t.Error("two attempts opened a circuit that needs three")
	}

	broken := newSinkHandle("b", DestinationPolicy{CircuitBreaker: cb}, 100, clock.Wall{})
	broken.noteHealth(down, 0, ms, false, log)
	broken.noteHealth(down, 10*ms, 11*ms, false, log)
	broken.noteHealth(up, 50*ms, 51*ms, false, log)
	broken.noteHealth(down, 60*ms, 61*ms, false, log)
	broken.noteHealth(down, 150*ms, 151*ms, false, log)
	if broken.health.isOpen() {
		t.Error("the failures before a success counted towards the window")
	}
	broken.noteHealth(down, 170*ms, 171*ms, false, log)
	if !broken.health.isOpen() {
		t.Error("three failures over the window since the last success did not open it")
	}

	permanent := newSinkHandle("c", DestinationPolicy{CircuitBreaker: cb}, 100, clock.Wall{})
	bad := []error{sinks.Permanent(errors.New("HTTP 400"))}
	for i := range 10 {
		permanent.noteHealth(bad, time.Duration(i)*100*ms, time.Duration(i)*100*ms+ms, false, log)
	}
	if permanent.health.isOpen() {
		t.Error("rows refused for their own fault opened the circuit")
	}

	off := newSinkHandle("d", DestinationPolicy{}, 100, clock.Wall{})
	for i := range 10 {
		off.noteHealth(down, time.Duration(i)*time.Second, time.Duration(i)*time.Second+ms, false, log)
	}
	if off.health.isOpen() {
		t.Error("a destination without a breaker opened its circuit")
	}
}

// A paused destination holds its rows with a delay that grows with the
// pause, up to maxHoldDelay.
func TestHoldDelays(t *testing.T) {
	h := newSinkHandle("a", DestinationPolicy{}, 100, clock.Wall{})
	now := time.Now()
	if a := h.admit(now, 1, 0); a.held != notHeld {
		t.Fatalf("not paused: %+v", a)
	}
	h.hold.set(dialectsState("a", true), now)
	for _, c := range []struct{ after, lo, hi time.Duration }{
		{0, 800 * time.Millisecond, 1200 * time.Millisecond},
		{10 * time.Second, 8 * time.Second, 12 * time.Second},
		{time.Hour, 24 * time.Second, 36 * time.Second},
	} {
		a := h.admit(now.Add(c.after), 1, 0)
		if a.held != heldPaused || a.delay < c.lo || a.delay > c.hi {
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
	h := newSinkHandle("hook", DestinationPolicy{CircuitBreaker: CircuitBreaker{Window: time.Second, MinAttempts: 3, ProbeInterval: time.Second}}, 100, clock.Wall{})
	down, up := []error{errors.New("HTTP 503")}, []error{nil}
	now := time.Now()
	h.noteHealth(down, 0, ms, false, log)
	h.noteHealth(down, 10*ms, 11*ms, false, log)
	if b := h.breakerView(false, now); b.down {
		t.Fatalf("two failures of the three the breaker needs: %+v", b)
	}
	h.noteHealth(down, 20*ms, 21*ms, false, log)
	if b := h.breakerView(false, now); !b.down || b.wait != 0 || b.probe || h.health.isOpen() {
		t.Fatalf("three failures within the window: %+v, want down with the circuit not open yet", b)
	}
	h.noteHealth(up, 30*ms, 31*ms, false, log)
	if b := h.breakerView(false, now); b.down {
		t.Fatalf("after a success: %+v", b)
	}
	for i := range 4 {
		at := time.Duration(100+400*i) * ms
		h.noteHealth(down, at, at+ms, false, log)
	}
	if !h.health.isOpen() {
		t.Fatal("four failures over more than the window did not open the circuit")
	}
	b := h.breakerView(true, h.health.view().openedAt.Add(10*time.Second))
	if !b.down || !b.probe || b.wait < 8*time.Second || b.wait > 12*time.Second {
		t.Fatalf("a probe that failed 10 s after the circuit opened: %+v, want down and a wait of about 10 s", b)
	}
	if b := newSinkHandle("off", DestinationPolicy{}, 100, clock.Wall{}).breakerView(true, now); b != (breakerView{}) {
		t.Fatalf("without a breaker: %+v, want every failure counted", b)
	}
	// A breaker that needs one failed attempt still does not call the
	// destination down for one: it may be the row's own.
	one := newSinkHandle("one", DestinationPolicy{CircuitBreaker: CircuitBreaker{Window: time.Hour, MinAttempts: 1, ProbeInterval: time.Second}}, 100, clock.Wall{})
	one.noteHealth(down, 0, ms, false, log)
	if b := one.breakerView(false, now); b.down {
		t.Fatalf("one failure with minAttempts 1: %+v", b)
	}
	one.noteHealth(down, 10*ms, 11*ms, false, log)
	if b := one.breakerView(false, now); !b.down {
		t.Fatalf("two failures with minAttempts 1: %+v, want down", b)
	}
}
