package faults

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// outcome is how a destination ended one delivery.
type outcome int

const (
	inFlight  outcome = iota
	accepted          // the destination took it (HTTP 2xx, or it reached a broker's consumer)
	refused           // the destination answered with a failure
	abandoned         // the sender went away before the answer (a timeout, a kill, a reset)
)

func (o outcome) String() string {
	return [...]string{"in flight", "accepted", "refused", "abandoned"}[o]
}

// delivery is one attempt to deliver a row, as its destination saw it.
type delivery struct {
	Dest    string // http, rabbit, kafka, nats
	ID      string
	Key     string
	Seq     int64
	Attempt int
	Replica string // X-Replica: which replica sent it (HTTP)
	Request int    // the receiver's request number (HTTP), or the position in the broker's log
	N       int    // the ledger's event number of its arrival
	DoneN   int    // the ledger's event number of its answer
	Arrived time.Time
	Done    time.Time
	Outcome outcome
	Status  int
	// FirstByte is when the first byte of the request reached the
	// receiver: a replica stopped in the middle of writing a request
	// finishes it after it continues, and the request then arrives late
	// although its delivery started before the stop.
	FirstByte time.Time
}

// ledger records every delivery at every destination. Arrivals and answers
// share one event counter, so that "sent before an earlier row was
// accepted" is a comparison of two numbers, with no clock involved.
type ledger struct {
	mu sync.Mutex
	n  int
	ds []*delivery
	// arrived is closed at the next arrival (and then replaced): a wait
	// for a request in flight hears of each one instead of polling.
	arrived chan struct{}
}

// arrive records a delivery that reached its destination and returns it.
func (l *ledger) arrive(d delivery) *delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	d.N, d.Arrived = l.n, time.Now()
	if d.FirstByte.IsZero() {
		d.FirstByte = d.Arrived
	}
	p := &d
	l.ds = append(l.ds, p)
	if l.arrived != nil {
		close(l.arrived)
		l.arrived = nil
	}
	return p
}

// finish records the answer to d.
func (l *ledger) finish(d *delivery, o outcome, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	d.DoneN, d.Done, d.Outcome, d.Status = l.n, time.Now(), o, status
}

// consumed records a message a broker's consumer read: it arrived and was
// accepted at once, in the consumer's order.
func (l *ledger) consumed(d delivery) {
	p := l.arrive(d)
	l.finish(p, accepted, 0)
}

// snapshot copies every delivery so far.
func (l *ledger) snapshot() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]delivery, len(l.ds))
	for i, d := range l.ds {
		out[i] = *d
	}
	return out
}

// waitInFlightFrom waits, for at most limit, until a replica has a request
// that arrived and has no answer yet.
func (l *ledger) waitInFlightFrom(replica string, limit time.Duration) {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		for i := len(l.ds) - 1; i >= 0 && i >= len(l.ds)-2000; i-- {
			if d := l.ds[i]; d.Replica == replica && d.Outcome == inFlight {
				l.mu.Unlock()
				return
			}
		}
		if l.arrived == nil {
			l.arrived = make(chan struct{})
		}
		next := l.arrived
		l.mu.Unlock()
		select {
		case <-next:
		case <-timeout.C:
			return
		}
	}
}

// row is one row a producer committed.
type row struct {
	ID          string
	Key         string // "" when unkeyed
	Seq         int64
	Dest        string
	CommittedAt time.Time
	// Inbox: the row came in through the inbox's HTTP source, as message N
	// of its aggregate (its key); its sequence is known once relayed.
	Inbox bool
	N     int
}

// finalState is a row's state in the database at the end of the run.
type finalState struct {
	State     string
	Attempt   int
	LastError string
	Seq       int64
}

// faultRecord is one fault as the suite injected it.
type faultRecord struct {
	Name string
	// Dups says whether the fault may cause duplicates: a replica that
	// dies, hangs or loses its database connection after the destination
	// accepted a row, or an answer lost on the way back. Phases without a
	// fault (and faults that cannot cause one) must have none.
	Dups bool
	// Stopped is the replica a SIGSTOP froze; Start and Healed bound the
	// stop.
	Stopped         string
	Start, Healed   time.Time
	Recovered       time.Duration // from Healed until every row written before it was delivered
	Note            string
	LostClaims      float64 // the stopped replica's queuebox_lost_claims_total after it continued
	LostClaimsKnown bool
}

// phaseOf returns the index of the last fault that started at or before
// at, or -1 before the first one.
func phaseOf(faults []*faultRecord, at time.Time) int {
	i := sort.Search(len(faults), func(i int) bool { return faults[i].Start.After(at) })
	return i - 1
}

// verdict is what the ledger says about a run.
type verdict struct {
	Rows     int
	PerDest  map[string]int
	Lost     []string // committed, never accepted by their destination
	Missing  []string // committed, but not in the table at the end
	Stuck    []string // not delivered at the end
	Disorder []string // a key's rows out of sequence order
	Stale    []string // a delivery started by a replica that no longer held the row
	// Unexplained are duplicates in a phase where nothing could cause one.
	Unexplained []string
	// Dups counts the duplicates (copies a destination accepted beyond the
	// first) per phase: -1 is before the first fault.
	Dups map[int]int
	// DupPairs counts them per phase by who sent the first accepted copy
	// and who sent the duplicate ("r1 then r2").
	DupPairs map[int]map[string]int
	// PhaseRows, PhaseLost and PhaseDisorder count per phase the rows
	// committed in it, the rows of it that were lost, and the disorders
	// seen in it.
	PhaseRows, PhaseLost, PhaseDisorder map[int]int
	Requests                            int
}

// failed reports whether the run broke a promise.
func (v *verdict) failed() bool {
	return len(v.Lost)+len(v.Missing)+len(v.Stuck)+len(v.Disorder)+len(v.Stale)+len(v.Unexplained) > 0
}

// problems lists the first few problems of each kind.
func (v *verdict) problems() string {
	var b strings.Builder
	for _, p := range []struct {
		what string
		list []string
	}{{"lost", v.Lost}, {"missing from the table", v.Missing}, {"not delivered at the end", v.Stuck}, {"out of order", v.Disorder},
		{"sent by a replica that no longer held the row", v.Stale}, {"unexplained duplicates", v.Unexplained}} {
		if len(p.list) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%d %s:\n", len(p.list), p.what)
		for _, s := range p.list[:min(10, len(p.list))] {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	return b.String()
}

// judge checks a run: rows are what producers committed, final their state
// in the table at the end, ds every delivery in arrival order, faults in the
// order they started. Destination "http" is checked strictly (a row is
// never sent for the first time while an earlier row of its key has not
// been accepted); broker destinations by their consumers' order (first
// arrivals in sequence order per key).
func judge(rows []row, final map[string]finalState, ds []delivery, faults []*faultRecord) *verdict {
	rows = fanOut(rows)
	v := &verdict{Rows: len(rows), PerDest: map[string]int{}, Dups: map[int]int{}, DupPairs: map[int]map[string]int{},
		PhaseRows: map[int]int{}, PhaseLost: map[int]int{}, PhaseDisorder: map[int]int{}, Requests: len(ds)}
	// Deliveries by destination and row: a fan-out row's deliveries to
	// each destination are judged on their own.
	byID := map[string][]*delivery{}
	for i := range ds {
		d := &ds[i]
		byID[d.Dest+"/"+d.ID] = append(byID[d.Dest+"/"+d.ID], d)
	}
	committed := map[string]bool{}
	for _, r := range rows {
		committed[r.Dest+"/"+r.ID] = true
		v.PerDest[r.Dest]++
		phase := phaseOf(faults, r.CommittedAt)
		v.PhaseRows[phase]++
		st, ok := final[r.ID]
		switch {
		case !ok:
			v.Missing = append(v.Missing, fmt.Sprintf("row %s (key %q, sequence %d) was committed but is not in the table", r.ID, r.Key, r.Seq))
		case st.State != "delivered":
			v.Stuck = append(v.Stuck, fmt.Sprintf("row %s (key %q, sequence %d, %s): %s, attempt %d, last_error %q", r.ID, r.Key, r.Seq, r.Dest, st.State, st.Attempt, st.LastError))
		}
		if c, ok := final[copyState(r.Dest, r.ID)]; ok && c.State != "delivered" {
			v.Stuck = append(v.Stuck, fmt.Sprintf("row %s (key %q, sequence %d), its copy for %s: %s, attempt %d, last_error %q", r.ID, r.Key, r.Seq, r.Dest, c.State, c.Attempt, c.LastError))
		}
		if firstAccept(byID[r.Dest+"/"+r.ID]) == nil {
			v.Lost = append(v.Lost, fmt.Sprintf("row %s (key %q, sequence %d, %s, committed in phase %s) never reached %s", r.ID, r.Key, r.Seq, r.Dest, phaseName(faults, phase), r.Dest))
			v.PhaseLost[phase]++
		}
	}
	for id, list := range byID {
		if !committed[id] {
			v.Stale = append(v.Stale, fmt.Sprintf("%s received row %s, which no producer committed", list[0].Dest, list[0].ID))
		}
	}

	// Order, per key, in sequence order.
	keys := map[string][]row{}
	for _, r := range rows {
		// A row without a sequence (an inbox message that never reached
		// the outbox) is reported missing; it has no place in an order.
		if r.Key != "" && r.Seq != 0 {
			keys[r.Key+"@"+r.Dest] = append(keys[r.Key+"@"+r.Dest], r)
		}
	}
	for key, rs := range keys {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Seq < rs[j].Seq })
		if strings.HasPrefix(rs[0].Dest, "http") {
			v.checkHTTPKey(key, rs, byID, faults)
		} else {
			v.checkBrokerKey(key, rs, byID, faults)
		}
	}

	// Duplicates: copies accepted beyond the first, each counted in the
	// phase it arrived in.
	for _, list := range byID {
		first := firstAccept(list)
		for _, d := range list {
			if d == first || d.Outcome != accepted {
				continue
			}
			phase := phaseOf(faults, d.Arrived)
			v.Dups[phase]++
			if v.DupPairs[phase] == nil {
				v.DupPairs[phase] = map[string]int{}
			}
			v.DupPairs[phase][sender(first)+" then "+sender(d)]++
			if phase < 0 || !faults[phase].Dups {
				v.Unexplained = append(v.Unexplained, fmt.Sprintf("%s accepted row %s again (request %d from %q, attempt %d) in phase %s; first accepted at request %d from %q",
					d.Dest, d.ID, d.Request, d.Replica, d.Attempt, phaseName(faults, phase), first.Request, first.Replica))
			}
		}
	}

	// A stopped replica, once continued, starts no delivery of a row that
	// another replica took over meanwhile.
	// The window ends when the next fault starts: by then the stopped
	// replica's old claims have long expired, and a row it sends is one it
	// claimed afresh (after another fault sent it back to pending).
	for i, f := range faults {
		if f.Stopped == "" {
			continue
		}
		end := time.Now().Add(time.Hour)
		if i+1 < len(faults) {
			end = faults[i+1].Start
		}
		for _, list := range byID {
			for _, d := range list {
				if d.Replica != f.Stopped || !d.FirstByte.After(f.Healed) || d.FirstByte.After(end) {
					continue
				}
				for _, o := range list {
					if o.Replica != f.Stopped && o.Outcome == accepted && o.Arrived.After(f.Start) && o.Arrived.Before(d.FirstByte) {
						v.Stale = append(v.Stale, fmt.Sprintf("%s sent row %s (request %d) %s after SIGCONT, although %s had taken it over and delivered it (request %d)",
							d.Replica, d.ID, d.Request, d.FirstByte.Sub(f.Healed).Round(time.Millisecond), o.Replica, o.Request))
						break
					}
				}
			}
		}
	}
	sort.Strings(v.Lost)
	sort.Strings(v.Stuck)
	sort.Strings(v.Disorder)
	sort.Strings(v.Stale)
	sort.Strings(v.Unexplained)
	return v
}

// fanDests are the ledger's names of the destinations of the fan-out
// route (topics fan.#), by their names in the configuration.
var fanDests = map[string]string{"hook": "http", "hookb": "http-b"}

// fanOut turns each row of the fan-out route into one row per
// destination: each destination receives every such row, in key order, on
// its own.
func fanOut(rows []row) []row {
	out := make([]row, 0, len(rows))
	for _, r := range rows {
		if r.Dest != "fan" {
			out = append(out, r)
			continue
		}
		for _, d := range []string{"http", "http-b"} {
			c := r
			c.Dest = d
			out = append(out, c)
		}
	}
	return out
}

// copyState is the key of a copy's final state: its destination (the
// ledger's name) and its row.
func copyState(dest, id string) string { return "copy " + dest + "/" + id }

// checkHTTPKey: a row is sent for the first time only after every earlier
// row of its key was accepted.
func (v *verdict) checkHTTPKey(key string, rs []row, byID map[string][]*delivery, faults []*faultRecord) {
	var prev *delivery // the latest first acceptance of an earlier row
	var prevRow row    // the row just before
	var prevSeq int64  // the sequence of the row prev accepted
	for _, r := range rs {
		list := byID[r.Dest+"/"+r.ID]
		if len(list) == 0 {
			continue // lost: reported as such
		}
		first := list[0]
		for _, d := range list {
			if d.N < first.N {
				first = d
			}
		}
		if prev == nil && prevRow.ID != "" {
			v.disorder(faults, first, fmt.Sprintf("key %s: sequence %d sent (request %d from %q) although sequence %d was never accepted", key, r.Seq, first.Request, first.Replica, prevRow.Seq))
		} else if prev != nil && first.N < prev.DoneN {
			v.disorder(faults, first, fmt.Sprintf("key %s: sequence %d sent (request %d from %q) before sequence %d was accepted (request %d from %q)",
				key, r.Seq, first.Request, first.Replica, prevSeq, prev.Request, prev.Replica))
		}
		if a := firstAccept(list); a != nil {
			if prev == nil || a.DoneN > prev.DoneN {
				prev, prevSeq = a, r.Seq
			}
		} else {
			prev = nil
		}
		prevRow = r
	}
}

// checkBrokerKey: first arrivals at the consumer follow sequence order.
func (v *verdict) checkBrokerKey(key string, rs []row, byID map[string][]*delivery, faults []*faultRecord) {
	var prev *delivery
	var prevSeq int64
	for _, r := range rs {
		a := firstAccept(byID[r.Dest+"/"+r.ID])
		if a == nil {
			continue // lost: reported as such
		}
		if prev != nil && a.N < prev.N {
			v.disorder(faults, a, fmt.Sprintf("key %s at %s: sequence %d arrived for the first time (position %d) before sequence %d (position %d)",
				key, r.Dest, r.Seq, a.Request, prevSeq, prev.Request))
		}
		if prev == nil || a.N > prev.N {
			prev, prevSeq = a, r.Seq
		}
	}
}

func (v *verdict) disorder(faults []*faultRecord, d *delivery, text string) {
	phase := phaseOf(faults, d.Arrived)
	v.PhaseDisorder[phase]++
	v.Disorder = append(v.Disorder, text+" in phase "+phaseName(faults, phase))
}

// firstAccept is the delivery the destination accepted first.
func firstAccept(list []*delivery) *delivery {
	var first *delivery
	for _, d := range list {
		if d.Outcome == accepted && (first == nil || d.DoneN < first.DoneN) {
			first = d
		}
	}
	return first
}

// sender names who sent a delivery: the replica over HTTP; a broker's
// consumer cannot tell.
func sender(d *delivery) string {
	if d.Replica == "" {
		return d.Dest
	}
	return d.Replica
}

func phaseName(faults []*faultRecord, phase int) string {
	if phase < 0 {
		return "before any fault"
	}
	return fmt.Sprintf("%q", faults[phase].Name)
}
