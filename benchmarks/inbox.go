package benchmarks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
)

// inboxClients is the number of concurrent senders of the inbox-http
// scenario.
const inboxClients = 8

// runInboxHTTP measures the HTTP inbox source: eight clients, each sending
// one request at a time (a new message id each, a bearer token, over 1,000
// aggregates), to the same handler `queuebox run` mounts at
// /inbox/{source}, on a loopback listener in this process. The rate is the
// messages accepted (answered 202, so committed) per second. It runs twice:
// the source alone, and with the engine relaying the inbox to the null
// destination at the same time, as a running replica does.
func runInboxHTTP(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, relay := range []bool{false, true} {
		r, err := e.inboxHTTP(ctx, relay)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (e *env) inboxHTTP(ctx context.Context, relay bool) (Result, error) {
	d, _, err := e.fresh(ctx, "inbox-http")
	if err != nil {
		return Result{}, err
	}
	cfg := e.config(d)
	cfg.Inbox.Sources = map[string]*bootstrap.InboxSourceConfig{"bench": {Type: "http", Token: "bench-token",
		Topic: "bench.{{ headers.X-Event-Type }}", AggregateID: "{{ headers.X-Aggregate-Id }}"}}
	cfg.Inbox.Relay.Enabled = relay
	l, err := bootstrap.FromConfig(cfg)
	if err != nil {
		return Result{}, err
	}
	rd, err := bootstrap.OpenDialect(ctx, l)
	if err != nil {
		return Result{}, err
	}
	defer rd.Close()
	var eng *actors.Engine
	if relay {
		opts, err := bootstrap.EngineOptions(l, rd, e.log)
		if err != nil {
			return Result{}, err
		}
		if eng, err = actors.New(opts); err != nil {
			return Result{}, err
		}
	}
	handler := bootstrap.InboxHTTP(l, rd, nil, e.log)
	mux := http.NewServeMux()
	mux.Handle(inbox.Prefix, handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + inbox.Prefix + "bench"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inboxClients, MaxConnsPerHost: inboxClients}}
	defer client.CloseIdleConnections()

	m := e.meter()
	if eng != nil {
		if err := eng.Start(ctx); err != nil {
			return Result{}, err
		}
		defer func() { _ = eng.Stop(context.WithoutCancel(ctx)) }()
	}
	start := time.Now()
	end := start.Add(time.Duration(e.o.Seconds) * time.Second)
	var (
		mu       sync.Mutex
		lat      []float64
		accepted int
		failed   int64
		firstErr error
	)
	var wg sync.WaitGroup
	for c := range inboxClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			ok, bad := 0, int64(0)
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				status, err := e.postInbox(ctx, client, url, fmt.Sprintf("c%d-%d", c, i), fmt.Sprintf("agg-%d", (c*7919+i)%1000))
				if status == http.StatusAccepted {
					ok++
					e.progress.add(1)
					mine = append(mine, float64(time.Since(t0))/float64(time.Millisecond))
					continue
				}
				bad++
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("inbox-http: a request was answered %d: %v", status, err)
				}
				mu.Unlock()
			}
			mu.Lock()
			lat, accepted, failed = append(lat, mine...), accepted+ok, failed+bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	variant := "source alone"
	if relay {
		variant = "with the relay running"
	}
	r := Result{Scenario: "inbox-http", Variant: variant, Rows: accepted, Keys: 1000, Replicas: 1, Failed: failed}
	m.stop(&r)
	r.Seconds = elapsed
	r.RowsPerSec = float64(accepted) / elapsed
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) *float64 { return ptr(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		r.P50, r.P95, r.P99 = q(0.50), q(0.95), q(0.99)
	}
	stmts, msgs := handler.Statements()
	r.Note = fmt.Sprintf("%d clients, one request at a time each, %d-byte JSON bodies, bearer token; messages accepted (202) per second; latency is the request's; %d insert statements of %.1f messages on average",
		inboxClients, len(e.payload), stmts, float64(msgs)/float64(max(stmts, 1)))
	// Every accepted message is a row, once.
	st, err := rd.InboxStats(ctx)
	if err != nil {
		return r, err
	}
	if got := st.Rows[dialects.InboxReceived] + st.Rows[dialects.InboxRelayed]; got != int64(accepted) {
		return r, fmt.Errorf("inbox-http: %d messages accepted, %d inbox rows", accepted, got)
	}
	if relay {
		r.Note += fmt.Sprintf("; %d of them relayed to the outbox by the end", st.Rows[dialects.InboxRelayed])
	}
	if firstErr != nil && accepted == 0 {
		return r, firstErr
	}
	return r, ctx.Err()
}

// postInbox sends one message and returns the answer's status.
func (e *env) postInbox(ctx context.Context, c *http.Client, url, id, aggregate string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(e.payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer bench-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Message-Id", id)
	req.Header.Set("X-Event-Type", "created")
	req.Header.Set("X-Aggregate-Id", aggregate)
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusAccepted {
		return res.StatusCode, errors.New(string(body))
	}
	return res.StatusCode, nil
}
