package benchmarks

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is what `queuebox bench` shows while it runs. On a terminal, a
// bar a scenario that counts rows: those the scenario has moved (drained,
// inserted and delivered, posted to the inbox), of those it will move when
// that is known ahead (a drain's backlog, a steady rate for a time); a
// scenario whose count is not known ahead (pgbench's transactions, the
// messages the inbox accepts in its time) counts up without a total.
// Elsewhere (a log, a pipe) a line names each scenario as it starts, and no
// bar is drawn, so that a log holds no redrawn bars.
type progress struct {
	w       io.Writer
	visible bool
	// throttle is the least time between two renderings.
	throttle time.Duration
	bar      atomic.Pointer[progressbar.ProgressBar]
}

func newProgress(o Options) *progress {
	p := &progress{w: o.Progress, visible: o.forceBar, throttle: 100 * time.Millisecond}
	if o.forceBar {
		p.throttle = 0 // a test reads every rendering
	}
	if f, ok := o.Progress.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.visible = true
	}
	return p
}

// start begins scenario s, the i-th of n, which will move planned rows (0:
// not known ahead).
func (p *progress) start(i, n int, s Scenario, planned int) {
	if !p.visible {
		fmt.Fprintf(p.w, "bench: %s (%s) ...\n", s.Name, s.What)
		return
	}
	max := int64(planned)
	if planned <= 0 {
		max = -1
	}
	// Short enough for 80 columns.
	bar := progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(p.w), progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("rows"),
		progressbar.OptionSetPredictTime(false), progressbar.OptionThrottle(p.throttle),
		progressbar.OptionSetDescription(fmt.Sprintf("[%d/%d] %-16s", i+1, n, s.Name)),
		progressbar.OptionSetRenderBlankState(true))
	p.bar.Store(bar)
}

// add counts rows moved; it may be called from any goroutine, and costs
// nothing without a bar (the drains call it as the engine completes rows).
func (p *progress) add(rows int) {
	if p == nil || !p.visible || rows <= 0 {
		return
	}
	if bar := p.bar.Load(); bar != nil {
		_ = bar.Add(rows)
	}
}

// finish clears the scenario's bar, full or not: the table at the end
// says what each scenario did.
func (p *progress) finish() {
	if bar := p.bar.Swap(nil); bar != nil {
		_ = bar.Clear()
	}
}

// plannedRows is what scenario name will move with the options o, when
// that is known ahead; 0 otherwise.
func plannedRows(name string, o Options, hold time.Duration) int {
	switch name {
	case "raw", "drain", "drain-keys", "hot-keys", "one-key", "drain-held":
		return o.Rows
	case "backlog":
		return 10 * o.Rows
	case "mailbox":
		return 5 * o.Rows
	case "batch", "in-flight":
		return 3 * o.Rows
	case "http":
		// Two drains: unkeyed and keyed.
		return 2 * o.Rows
	case "history":
		return len(historyRuns) * o.Rows
	case "fanout":
		return len(offOnRuns) * o.Rows
	case "tracing":
		return len(offOnRuns) * o.Rows
	case "replicas":
		return 6 * o.Rows
	case "latency":
		// One second of warm-up, then --seconds.
		return o.Rate * (o.Seconds + 1)
	case "rabbitmq", "nats", "kafka":
		// The relay's drain; the plain publisher's ceiling is not counted.
		return o.Rows
	case "wake-after-idle":
		// One row after each quiet spell, to each kind of wake-up.
		return 2 * wakeRows
	case "outboxes":
		// One row after each quiet spell, then two drains of --rows.
		return outboxRows + 2*o.Rows
	case "long-transaction":
		return len(holders) * o.Rate * int((2*holdWindow+hold)/time.Second)
	case "trickle":
		// Each rate for --seconds (default 30).
		seconds := 30
		if o.secondsGiven {
			seconds = o.Seconds
		}
		n := 0
		for _, r := range trickleRates {
			n += r * seconds
		}
		return n
	}
	return 0
}
