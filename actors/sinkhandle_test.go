package actors

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Publishes overlap: at a recovery, a request sent while the destination was
// down can fail after a later one succeeded. That late failure, and a late
// success after a newer failure, say nothing new: one line for the outage,
// one for the recovery.
func TestHealthLinesFollowWhenPublishesBegan(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	h := &sinkHandle{name: "hook"}
	down := []error{errors.New("HTTP 502 Bad Gateway")}
	up := []error{nil}
	ms := time.Millisecond
	h.noteHealth(down, 1*ms, log) // the outage
	h.noteHealth(up, 0*ms, log)   // sent before that failure: old news
	h.noteHealth(down, 2*ms, log)
	h.noteHealth(up, 5*ms, log)   // the recovery
	h.noteHealth(down, 4*ms, log) // sent before the recovery: old news
	h.noteHealth(down, 3*ms, log)
	h.noteHealth(up, 6*ms, log)
	lines := buf.String()
	if strings.Count(lines, "destination failing") != 1 || strings.Count(lines, "destination delivering again") != 1 {
		t.Fatalf("want one line for the outage and one for the recovery:\n%s", lines)
	}
	h.noteHealth(down, 7*ms, log) // a new outage
	if strings.Count(buf.String(), "destination failing") != 2 {
		t.Fatalf("a failure sent after the recovery is a new outage:\n%s", buf.String())
	}
}
