package actors

import (
	"strings"
	"testing"
)

func TestCheckPayload(t *testing.T) {
	ok := []string{`{}`, ` {"a":1}`, `[1,2]`}
	for _, p := range ok {
		for _, typed := range []bool{false, true} {
			if err := checkPayload([]byte(p), typed); err != nil {
				t.Errorf("%s (typed %v): %v", p, typed, err)
			}
		}
	}
	bad := map[string]string{
		`"{\"a\":1}"`: "encoded twice",
		`"hello"`:     "is a JSON string",
		`3.5`:         "JSON number",
		`true`:        "JSON boolean",
		`null`:        "JSON null",
		`{"a":`:       "not valid JSON",
		``:            "empty",
	}
	for p, want := range bad {
		if err := checkPayload([]byte(p), false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", p, err, want)
		}
		// A JSON column holds valid JSON: every case but the invalid one
		// reads the same when the database vouches for it.
		if want == "not valid JSON" {
			continue
		}
		if err := checkPayload([]byte(p), true); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q from a JSON column: %v, want %q", p, err, want)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := parseHeaders([]byte(`{"X-Tenant":"acme","X-Region":"eu"}`))
	if err != nil || h["X-Tenant"] != "acme" || len(h) != 2 {
		t.Fatalf("%v %v", h, err)
	}
	for in, want := range map[string]string{
		`{"X-Count": 3}`:         `"X-Count" is a number`,
		`["a"]`:                  "got an array",
		`{"bad name": "x"}`:      "not a valid header",
		`{"X-A": "line\nbreak"}`: "not a valid header",
	} {
		if _, err := parseHeaders([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
