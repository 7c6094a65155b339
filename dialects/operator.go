package dialects

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// selectChunk is how many rows one OutboxSelect of a replay reads.
const selectChunk = 5000

// Replay puts the rows that f selects back to pending, as the replay of the
// life-cycle table says, and returns how many it changed (with dryRun, how
// many it would change). Without States, f selects dead rows, or for a
// replay by id dead and delivered ones. It never touches a processing row.
// With by set, each row's attempt history records the replay and by, who
// or what replayed (see OutboxReplayIDs).
//
// It walks the selection in chunks in sequence order, applies the topic
// pattern in Go (so that patterns mean the same everywhere), and replays
// each chunk in one statement, so a replay of millions of rows holds no long
// lock.
func Replay(ctx context.Context, op Operator, f Filter, dryRun bool, by string) (int, error) {
	if len(f.States) == 0 {
		f.States = ReplayDefaultStates(f)
	}
	total := 0
	after := int64(-1 << 62)
	for {
		chunk, err := op.OutboxSelect(ctx, SelectParams{Filter: f, AfterSequence: after, Limit: selectChunk})
		if err != nil {
			return total, err
		}
		keep, err := Keep(ctx, op, f, len(chunk), func(i int) (uuid.UUID, string) { return chunk[i].ID, chunk[i].Topic })
		if err != nil {
			return total, err
		}
		ids := make([]uuid.UUID, 0, len(chunk))
		for i, r := range chunk {
			after = r.Sequence
			if keep[i] {
				ids = append(ids, r.ID)
			}
		}
		switch {
		case dryRun:
			total += len(ids)
		case len(ids) > 0:
			n, err := op.OutboxReplayIDs(ctx, ids, f.States, by)
			if err != nil {
				return total, err
			}
			total += n
		}
		if len(chunk) < selectChunk {
			return total, nil
		}
	}
}

// Keep reports which of n rows (at gives each one's id and topic) f
// selects by what runs in Go: its TopicMatch, then its Rows, which reads
// the rows it decides in one statement. The other fields of f are the
// database's to apply.
func Keep(ctx context.Context, op Operator, f Filter, n int, at func(int) (uuid.UUID, string)) ([]bool, error) {
	keep := make([]bool, n)
	var read []uuid.UUID
	var index map[uuid.UUID]int
	for i := range n {
		id, topic := at(i)
		switch {
		case f.TopicMatch != nil && !f.TopicMatch(topic):
		case f.Rows != nil && f.Rows.ByRow(topic):
			if index == nil {
				index = map[uuid.UUID]int{}
			}
			read, index[id] = append(read, id), i
		default:
			keep[i] = true
		}
	}
	if len(read) == 0 {
		return keep, nil
	}
	rows, err := op.OutboxRowsOf(ctx, read)
	if err != nil {
		return nil, fmt.Errorf("reading rows that a route filter routes: %w", err)
	}
	for _, r := range rows {
		if f.Rows.Keep(r) {
			keep[index[r.ID]] = true
		}
	}
	return keep, nil
}

// listPage is how many rows one OutboxList page reads while List looks for
// rows whose topic matches.
const listPage = 500

// List returns up to limit rows that f selects, newest update first,
// starting after the cursor when one is given. The second result is the
// cursor of the next page, nil when there is none. Without States, f selects
// dead rows.
func List(ctx context.Context, op Operator, f Filter, after *Cursor, limit int) ([]ListedRow, *Cursor, error) {
	if len(f.States) == 0 {
		f.States = []State{Dead}
	}
	var out []ListedRow
	for len(out) < limit {
		page := listPage
		if f.TopicMatch == nil && f.Rows == nil {
			page = limit - len(out)
		}
		rows, err := op.OutboxList(ctx, ListParams{Filter: f, After: after, Limit: page})
		if err != nil {
			return nil, nil, err
		}
		keep, err := Keep(ctx, op, f, len(rows), func(i int) (uuid.UUID, string) { return rows[i].ID, rows[i].Topic })
		if err != nil {
			return nil, nil, err
		}
		for i, r := range rows {
			if keep[i] {
				out = append(out, r)
				if len(out) == limit {
					// More may follow: the next page starts after this row,
					// unless it was the last one there is.
					if i == len(rows)-1 && len(rows) < page {
						return out, nil, nil
					}
					c := CursorOf(r)
					return out, &c, nil
				}
			}
		}
		if len(rows) < page {
			return out, nil, nil
		}
		c := CursorOf(rows[len(rows)-1])
		after = &c
	}
	return out, nil, nil
}

// ReplayDefaultStates is the state selection of a replay that names none:
// dead rows, or, for a replay by id, dead and delivered rows (naming a row is
// asking for it).
func ReplayDefaultStates(f Filter) []State {
	if len(f.IDs) > 0 {
		return []State{Dead, Delivered}
	}
	return []State{Dead}
}

// StatsFrom assembles OutboxStats from a dialect's three reads: rows per
// state, dead rows per topic (each a (name, count) query), and the pending
// summary. Every state of the life cycle is present, counted or not.
func StatsFrom(byState, deadByTopic func(each func(string, int64)) error, pending func() (PendingSummary, error)) (Stats, error) {
	st := Stats{Rows: map[State]int64{}, DeadByTopic: map[string]int64{}}
	for _, s := range States {
		st.Rows[s] = 0
	}
	if err := byState(func(s string, n int64) { st.Rows[State(s)] = n }); err != nil {
		return st, err
	}
	var err error
	if st.PendingSummary, err = pending(); err != nil {
		return st, err
	}
	err = deadByTopic(func(t string, n int64) { st.DeadByTopic[t] = n })
	return st, err
}
