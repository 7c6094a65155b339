package admin

import (
	"context"
	"sort"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// Stats is the status summary of the outbox table.
type Stats struct {
	// Rows counts rows per state; every state is present.
	Rows map[dialects.State]int64 `json:"rows"`
	// OldestPending is the age of the oldest pending row; zero when none.
	OldestPending        time.Duration `json:"-"`
	OldestPendingSeconds float64       `json:"oldestPendingSeconds"`
	// DeadByTopic counts dead rows per topic.
	DeadByTopic map[string]int64 `json:"deadByTopic"`
}

// DeadTopics returns the topics that have dead rows, sorted.
func (s Stats) DeadTopics() []string {
	out := make([]string, 0, len(s.DeadByTopic))
	for t := range s.DeadByTopic {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Status reads the status summary.
func Status(ctx context.Context, d dialects.Dialect) (Stats, error) {
	st, err := d.OutboxStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Rows: map[dialects.State]int64{}, OldestPending: st.OldestPending,
		OldestPendingSeconds: st.OldestPending.Seconds(), DeadByTopic: map[string]int64{}}
	for _, s := range dialects.States {
		out.Rows[s] = st.Rows[s]
	}
	for t, n := range st.DeadByTopic {
		out.DeadByTopic[t] = n
	}
	return out, nil
}

// DeadRows lists up to limit dead rows that f selects, the most recently
// updated first. Callers check limit with CheckLimit, which names it as
// their source does.
func DeadRows(ctx context.Context, d dialects.Dialect, f dialects.Filter, limit int) ([]dialects.ListedRow, error) {
	f.States = []dialects.State{dialects.Dead}
	rows, _, err := dialects.List(ctx, d, f, nil, limit)
	return rows, err
}

// Replay puts the rows f selects back to pending (attempt 0, due now) and
// returns how many; with dryRun it only counts them. Rows being delivered
// are never touched. f must come from a ForReplay filter, which refuses to
// select everything by accident.
func Replay(ctx context.Context, d dialects.Dialect, f dialects.Filter, dryRun bool) (int, error) {
	return dialects.Replay(ctx, d, f, dryRun)
}
