package admin

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// The same mistake gets the same message from every source, naming the
// input as it was written there.
func TestFilterMistakesNameTheInputInEverySource(t *testing.T) {
	cases := []struct {
		name  string
		text  FilterText
		names [3]string // the input as flags, query and JSON name it
		want  []string  // in the message from every source
	}{
		{"unknown state", FilterText{States: []string{"deadd"}}, [3]string{`--state "deadd"`, `state "deadd"`, `states "deadd"`},
			[]string{"is not a state", "use dead or delivered"}},
		{"state replay cannot select", FilterText{States: []string{"pending"}}, [3]string{"--state", "state", "states"},
			[]string{"replay does not select pending rows", "use dead or delivered"}},
		{"malformed id", FilterText{IDs: []string{"0b7e3f4e"}}, [3]string{`--id "0b7e3f4e"`, `id "0b7e3f4e"`, `ids "0b7e3f4e"`},
			[]string{"is not a row id", "a UUID such as"}},
		{"invalid time", FilterText{Since: "yesterday"}, [3]string{`--since "yesterday"`, `since "yesterday"`, `since "yesterday"`},
			[]string{"neither an RFC 3339 time nor a duration", "2025-01-31T12:00:00Z", "24h"}},
		{"bad pattern", FilterText{Topic: "order.*x"}, [3]string{"--topic", "topic", "topic"},
			[]string{"mixes a wildcard", "order.#"}},
		{"empty range", FilterText{Since: "1h", Until: "2h"}, [3]string{`--until "2h": is not after --since "1h"`, `until "2h": is not after since "1h"`, `until "2h": is not after since "1h"`},
			[]string{"no row can match", "a duration counts back from now", "since 2h", "until 1h"}},
		{"empty range of times", FilterText{Since: "2025-02-01T00:00:00Z", Until: "2025-01-01T00:00:00Z"}, [3]string{"--until", "until", "until"},
			[]string{"no row can match", "a later time than"}},
		{"nothing selected", FilterText{}, [3]string{"give --id", "give id", "give ids"},
			[]string{"say which rows"}},
	}
	for _, c := range cases {
		for i, src := range []Source{Flags, Query, JSON} {
			_, err := c.text.Filter(src, ForReplay, now)
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s (source %d): got %v, want an *InputError", c.name, i, err)
				continue
			}
			for _, w := range append([]string{c.names[i]}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (source %d): %q lacks %q", c.name, i, err, w)
				}
			}
		}
	}
	// dead list offers dead rows only.
	if _, err := (FilterText{States: []string{"delivered"}}).Filter(Flags, ForDeadRows, now); err == nil || !strings.Contains(err.Error(), "use dead") {
		t.Errorf("dead list accepted delivered: %v", err)
	}
}

func TestFilterFromEverySourceSelectsTheSameRows(t *testing.T) {
	id := uuid.New()
	flags, err := FilterText{IDs: []string{id.String()}, States: []string{"dead", "delivered"}, Topic: "order.#", Key: "cust-1",
		Since: "24h", Until: "2025-03-01T11:00:00Z", ErrorContains: "HTTP 410"}.Filter(Flags, ForReplay, now)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := url.ParseQuery("id=" + id.String() + "&state=dead&state=delivered&topic=order.%23&key=cust-1&since=24h&until=2025-03-01T11:00:00Z&errorContains=HTTP+410&limit=5")
	query, err := FilterFromQuery(q, ForReplay, now, nil, "limit")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"ids": ["` + id.String() + `"], "states": ["dead", "delivered"], "topic": "order.#", "key": "cust-1",
		"since": "24h", "until": "2025-03-01T11:00:00Z", "errorContains": "HTTP 410", "dryRun": true}`
	req, err := ReplayFromJSON(strings.NewReader(body), now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !req.DryRun {
		t.Error("dryRun was not read")
	}
	for name, f := range map[string]dialects.Filter{"flags": flags, "query": query, "json": req.Filter} {
		if len(f.IDs) != 1 || f.IDs[0] != id || len(f.States) != 2 || f.States[1] != dialects.Delivered ||
			f.Key == nil || *f.Key != "cust-1" || f.ErrorContains != "HTTP 410" ||
			!f.Since.Equal(now.Add(-24*time.Hour)) || !f.Until.Equal(time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC)) {
			t.Errorf("%s: %+v", name, f)
		}
		if f.TopicMatch == nil || !f.TopicMatch("order.created") || f.TopicMatch("user.created") {
			t.Errorf("%s: the topic pattern does not select order.#", name)
		}
	}
}

func TestQueryAndJSONRefuseWhatTheyDoNotKnow(t *testing.T) {
	q, _ := url.ParseQuery("stat=dead")
	if _, err := FilterFromQuery(q, ForRows, now, nil, "limit", "after"); err == nil ||
		!strings.Contains(err.Error(), "stat: is not a parameter of this request; the parameters are after, errorContains, id, key, limit, since, state, topic, until") {
		t.Errorf("an unknown parameter: %v", err)
	}
	q, _ = url.ParseQuery("topic=a&topic=b")
	if _, err := FilterFromQuery(q, ForRows, now, nil); err == nil || !strings.Contains(err.Error(), "topic: is given more than once") {
		t.Errorf("a repeated topic: %v", err)
	}
	for body, want := range map[string]string{
		`{"state": ["dead"]}`:                   "state: is not a field of a replay request; the fields are dryRun, errorContains, ids, key, since, states, topic, until",
		`{"states": "dead"}`:                    `states: has the wrong type (string); give a list of text, such as ["dead"]`,
		`{"states": ["dead"], "dryRun": "yes"}`: "dryRun: has the wrong type (string); give true or false",
		`[1, 2]`:                                "the body is not a JSON object",
		``:                                      "the body is empty",
		`{}`:                                    `say which rows; give ids, or at least one filter ("states": ["dead"] replays every dead row)`,
	} {
		_, err := ReplayFromJSON(strings.NewReader(body), now, nil)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
			t.Errorf("body %s: %v, want %q", body, err, want)
		}
	}
}

func TestLimit(t *testing.T) {
	if n, err := ParseLimit(Query, "", 100); n != 100 || err != nil {
		t.Errorf("the default: %d %v", n, err)
	}
	if n, err := ParseLimit(Query, "25", 100); n != 25 || err != nil {
		t.Errorf("25: %d %v", n, err)
	}
	if _, err := ParseLimit(Query, "lots", 100); err == nil || !strings.Contains(err.Error(), `limit "lots": is not a whole number; use a number from 1 to 10000`) {
		t.Errorf("lots: %v", err)
	}
	if err := CheckLimit(Flags, 0); err == nil || !strings.Contains(err.Error(), `--limit "0": is out of range`) {
		t.Errorf("0: %v", err)
	}
}
