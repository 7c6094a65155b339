package inbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// Consumer is a broker source (the rabbitmq, kafka and nats subpackages).
// Start connects in the background and consumes until Stop; it reconnects
// by itself after a failure. Stop drains: it stops taking messages, lets the
// batch in hand be stored and acknowledged, then closes the connection. A
// message taken but not yet stored is left unacknowledged, and the broker
// delivers it again.
type Consumer interface {
	// Source is the source's name.
	Source() string
	Start() error
	Stop(ctx context.Context) error
}

// Storer stores the batches of one broker source: the messages that map in
// one transaction, retried while the database fails, and counted.
type Storer struct {
	Source   string
	Inbox    dialects.Inbox
	Observer Observer
	Log      *slog.Logger

	mu       sync.Mutex
	lastWarn time.Time
	quiet    int
}

// NewStorer builds the storer of one source.
func NewStorer(source string, store dialects.Inbox, obs Observer, log *slog.Logger) *Storer {
	if obs == nil {
		obs = NopObserver{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Storer{Source: source, Inbox: store, Observer: obs, Log: log}
}

// Retry delays of a batch the database did not take.
const (
	storeRetryFirst = 100 * time.Millisecond
	storeRetryMax   = 5 * time.Second
)

// Store stores msgs in one transaction and counts each as stored or a
// duplicate. It returns the indexes of the messages the database refused
// for good (dialects.ErrInvalidValue; each is counted rejected and logged):
// the caller refuses those to its broker and acknowledges the others.
// While the database fails otherwise, it waits and tries again, logging
// once when it starts failing and once when it works again; it returns an
// error only when ctx ends first, and then nothing of msgs may be
// acknowledged.
func (s *Storer) Store(ctx context.Context, msgs []dialects.InboxMessage) (refused []int, err error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	delay, failing := backoff.Capped{First: storeRetryFirst, Max: storeRetryMax}, false
	for {
		receipts, err := s.Inbox.InboxReceive(ctx, msgs)
		if err == nil {
			if failing {
				s.Log.Info("inbox: the database stores messages again", "source", s.Source)
			}
			for _, r := range receipts {
				if r.Stored {
					s.Observer.InboxReceived(s.Source, Stored)
				} else {
					s.Observer.InboxReceived(s.Source, Duplicate)
				}
			}
			return nil, nil
		}
		if errors.Is(err, dialects.ErrInvalidValue) {
			if len(msgs) == 1 {
				s.Reject(msgs[0].MessageID, err)
				return []int{0}, nil
			}
			// One message spoils the statement: store them one by one.
			for i := range msgs {
				r, err := s.Store(ctx, msgs[i:i+1])
				if err != nil {
					return nil, err
				}
				if len(r) > 0 {
					refused = append(refused, i)
				}
			}
			return refused, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !failing {
			failing = true
			s.Log.Warn("inbox: storing messages failed; they stay unacknowledged and are retried", "source", s.Source, "messages", len(msgs), "error", err)
		}
		if !Sleep(ctx, delay.Next()) {
			return nil, ctx.Err()
		}
	}
}

// Reject counts a message that can never be stored and logs why: the first
// at once, then at most one line a second with how many were refused in
// between.
func (s *Storer) Reject(messageID string, err error) {
	s.Observer.InboxReceived(s.Source, Rejected)
	var r *Rejection
	reason := err.Error()
	if errors.As(err, &r) {
		reason = r.Reason
	}
	s.mu.Lock()
	now := time.Now()
	if now.Sub(s.lastWarn) < time.Second {
		s.quiet++
		s.mu.Unlock()
		return
	}
	quiet := s.quiet
	s.lastWarn, s.quiet = now, 0
	s.mu.Unlock()
	s.Log.Warn("inbox: a message was refused and will not be stored", "source", s.Source, "messageId", messageID,
		"reason", reason, "refusedSinceLastLine", quiet)
}

// ReconnectDelay is the delay between a consumer's tries to reach its
// broker: 250 ms doubling to 10 s, short enough that a broker restart is
// hardly noticed, long enough that a broker that stays away is not
// hammered.
func ReconnectDelay() backoff.Capped {
	return backoff.Capped{First: 250 * time.Millisecond, Max: 10 * time.Second}
}

// Reconnect paces the sessions of a consumer with its broker: after a
// session that failed it waits (ReconnectDelay) and logs the first failure
// of a spell; once a session consumes again it says so and starts the
// delays over. Each consumer goroutine keeps its own.
type Reconnect struct {
	log *slog.Logger
	// lost is the warning logged when sessions start failing.
	lost  string
	delay backoff.Capped
	down  bool
}

// NewReconnect paces a consumer that logs to log, and logs lost (with the
// error) when it cannot consume.
func NewReconnect(log *slog.Logger, lost string) *Reconnect {
	return &Reconnect{log: log, lost: lost, delay: ReconnectDelay()}
}

// Consuming marks a session that reached its broker and consumes.
func (r *Reconnect) Consuming() {
	r.delay.Reset()
	if r.down {
		r.log.Info("inbox: consuming again")
		r.down = false
	}
}

// Failed takes a session's failure: it logs the first of a spell and waits
// before the next session. It reports false when ctx ended first.
func (r *Reconnect) Failed(ctx context.Context, err error) bool {
	if !r.down {
		r.log.Warn(r.lost, "error", err)
		r.down = true
	}
	return Sleep(ctx, r.delay.Next())
}

// Sleep waits d or until ctx ends, and reports whether ctx is still alive.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Loop is the life of a consumer's goroutine: Start runs it once; Stop
// ends the consuming and waits for the loop to finish the batch in hand.
type Loop struct {
	mu        sync.Mutex
	started   bool
	stopping  context.CancelFunc
	hardStop  context.CancelFunc
	done      chan struct{}
	stopOnce  sync.Once
	stopError error
}

// Start runs loop in a goroutine. consume ends when Stop is called: the
// loop then takes no new message. hard ends when Stop's own context does
// (or after the loop ended): the loop then abandons the batch in hand
// unacknowledged.
func (l *Loop) Start(loop func(consume, hard context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return errors.New("the consumer is started already")
	}
	l.started = true
	consume, stopping := context.WithCancel(context.Background())
	hard, hardStop := context.WithCancel(context.Background())
	l.stopping, l.hardStop, l.done = stopping, hardStop, make(chan struct{})
	go func() {
		defer close(l.done)
		loop(consume, hard)
	}()
	return nil
}

// Stop drains and waits; when ctx ends first, the batch in hand is
// abandoned (the broker delivers it again) and Stop returns ctx's error
// once the loop has ended. Safe to call twice, and before Start.
func (l *Loop) Stop(ctx context.Context) error {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		started := l.started
		l.mu.Unlock()
		if !started {
			return
		}
		l.stopping()
		select {
		case <-l.done:
		case <-ctx.Done():
			l.stopError = ctx.Err()
			l.hardStop()
			<-l.done
		}
		l.hardStop()
	})
	return l.stopError
}
