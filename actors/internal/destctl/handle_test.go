package destctl

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Publishes overlap: at a recovery, a request sent while the destination was
// down can fail after a later one succeeded, and one sent a little before the
// recovery was noticed can reach the destination after an earlier one (a new
// connection, a slow dial). Those late outcomes say nothing new: one line for
// the outage, one for the recovery.
func TestHealthLinesFollowWhenPublishesBegan(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	h := &Handle{name: "hook"}
	down := []error{errors.New("HTTP 502 Bad Gateway")}
	up := []error{nil}
	ms := time.Millisecond
	h.NoteHealth(down, 10*ms, 15*ms, false, log) // the outage, seen at 15
	h.NoteHealth(up, 0*ms, 16*ms, false, log)    // sent before that failure: old news
	h.NoteHealth(up, 12*ms, 17*ms, false, log)   // sent before the outage was seen: old news
	h.NoteHealth(down, 20*ms, 21*ms, false, log)
	h.NoteHealth(up, 50*ms, 55*ms, false, log)   // the recovery, seen at 55
	h.NoteHealth(down, 40*ms, 56*ms, false, log) // sent before the recovery: old news
	h.NoteHealth(down, 52*ms, 57*ms, false, log) // sent after the recovery's own request, before it was seen: old news
	h.NoteHealth(up, 60*ms, 61*ms, false, log)
	h.NoteHealth(down, 56*ms, 90*ms, false, log) // sent after the recovery was seen, but before a later success: old news
	lines := buf.String()
	if strings.Count(lines, "destination failing") != 1 || strings.Count(lines, "destination delivering again") != 1 {
		t.Fatalf("want one line for the outage and one for the recovery:\n%s", lines)
	}
	h.NoteHealth(down, 70*ms, 71*ms, false, log) // a new outage
	if strings.Count(buf.String(), "destination failing") != 2 {
		t.Fatalf("a failure sent after the recovery was seen is a new outage:\n%s", buf.String())
	}
	h.NoteHealth(up, 72*ms, 73*ms, false, log) // and its recovery
	if strings.Count(buf.String(), "destination delivering again") != 2 {
		t.Fatalf("a success sent after the outage was seen is a recovery:\n%s", buf.String())
	}
}
