package actors_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// recorder is an Observer that keeps everything it hears.
type recorder struct {
	mu        sync.Mutex
	claimed   int
	released  int
	lost      int
	completed int
	routes    map[[2]string]*routeRecord
}

type routeRecord struct {
	r        *recorder
	outcomes map[actors.DeliveryOutcome]int
	// badLatency counts delivered rows without a latency, or others with one.
	badLatency int
	// published counts rows that report a Publish duration.
	published int
}

func newRecorder() *recorder { return &recorder{routes: map[[2]string]*routeRecord{}} }

func (r *recorder) Claimed(rows int, _ time.Duration) { r.mu.Lock(); r.claimed += rows; r.mu.Unlock() }
func (r *recorder) Released(rows int)                 { r.mu.Lock(); r.released += rows; r.mu.Unlock() }
func (r *recorder) LostClaims(rows int)               { r.mu.Lock(); r.lost += rows; r.mu.Unlock() }
func (r *recorder) Completed(rows int, _ time.Duration) {
	r.mu.Lock()
	r.completed += rows
	r.mu.Unlock()
}

func (r *recorder) Route(route, destination string) actors.RouteObserver {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := &routeRecord{r: r, outcomes: map[actors.DeliveryOutcome]int{}}
	r.routes[[2]string{route, destination}] = rr
	return rr
}

func (rr *routeRecord) Finished(o actors.DeliveryOutcome, publish, latency time.Duration) {
	rr.r.mu.Lock()
	defer rr.r.mu.Unlock()
	rr.outcomes[o]++
	if (o == actors.Delivered) != (latency > 0) {
		rr.badLatency++
	}
	if publish > 0 {
		rr.published++
	}
}

// count reads one route's count of an outcome.
func (r *recorder) count(route, destination string, o actors.DeliveryOutcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rr := r.routes[[2]string{route, destination}]; rr != nil {
		return rr.outcomes[o]
	}
	return -1
}

// The observer hears every claim, every row's end under its route and
// destination, and every completion, in step with the engine's counters;
// once the work is done, every mailbox is empty.
func TestObserverHearsEveryRow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, failPolicy)
	h.routeOrdersToHook(recv.URL+"/x", "audit.#")
	rec := newRecorder()
	h.opts.Observer = rec
	all := rows(10, 10, 50, func(i int) int {
		if i%5 == 0 {
			return 1
		}
		return 0
	})
	h.insert(all...)
	h.insert(testkit.Row("nobody.listens"))
	e := h.start()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	h.waitState(dialects.Dead, 1, time.Minute)

	// The completion is reported after its statement returns: wait for it.
	st := &e.Stats
	written := func() int64 {
		return st.Delivered.Load() + st.Retried.Load() + st.Dead.Load() + st.Released.Load() + st.Deferred.Load()
	}
	_ = testkit.Poll(30*time.Second, testkit.True(func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return int64(rec.completed) == written()
	})) // the checks below say what is missing
	if got, want := rec.count("order.#", "hook", actors.Delivered), 100; got != want {
		t.Errorf("order.# -> hook delivered %d rows, want %d", got, want)
	}
	if got, want := rec.count("audit.#", "null", actors.Delivered), 50; got != want {
		t.Errorf("audit.# -> null delivered %d rows, want %d", got, want)
	}
	if got := rec.count("order.#", "hook", actors.Retried) + rec.count("audit.#", "null", actors.Retried); int64(got) != st.Retried.Load() || got == 0 {
		t.Errorf("retries heard: %d; the engine counted %d (and some rows failed once)", got, st.Retried.Load())
	}
	if got := rec.count("", "", actors.Dead); got != 1 {
		t.Errorf("the row that matches no route was heard dead %d times under no route, want once", got)
	}
	rec.mu.Lock()
	if int64(rec.claimed) != st.Claimed.Load() {
		t.Errorf("claims heard: %d rows; the engine counted %d", rec.claimed, st.Claimed.Load())
	}
	if int64(rec.released) != st.Released.Load() {
		t.Errorf("releases heard: %d rows; the engine counted %d", rec.released, st.Released.Load())
	}
	if int64(rec.completed) != written() {
		t.Errorf("completions heard: %d rows; the engine decided %d outcomes", rec.completed, written())
	}
	for names, rr := range rec.routes {
		if rr.badLatency != 0 {
			t.Errorf("%v: %d rows whose latency does not match their outcome", names, rr.badLatency)
		}
		if names[0] != "" && rr.published == 0 {
			t.Errorf("%v: no row reports how long its Publish took", names)
		}
	}
	rec.mu.Unlock()

	// Nothing is left in any mailbox once the work is done.
	for _, k := range actors.ActorKinds() {
		if err := testkit.Poll(30*time.Second, testkit.True(func() bool { return e.MailboxLength(k) == 0 })); err != nil {
			t.Errorf("%d messages stay in the %s mailboxes of an idle engine", e.MailboxLength(k), k)
		}
	}
	_ = e.Stop(context.Background())
}
