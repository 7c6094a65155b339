package benchmarks

import "testing"

// The admin address comes from the replica's log, whose lines may arrive
// in pieces and among other lines.
func TestAdminAddrFromTheLog(t *testing.T) {
	var a adminAddr
	for _, piece := range []string{
		`{"level":"INFO","msg":"engine started"}` + "\n" + `{"level":"INFO","msg":"admin list`,
		`ening","address":"127.0.0.1:4`,
		`1234","page":"http://127.0.0.1:41234/"}` + "\n",
		`{"level":"INFO","msg":"admin listening","address":"127.0.0.1:9"}` + "\n",
	} {
		if a.get() != "" && a.get() != "127.0.0.1:41234" {
			t.Fatalf("address %q before the whole line arrived", a.get())
		}
		if _, err := a.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.get(); got != "127.0.0.1:41234" {
		t.Fatalf("address %q, want the first listening line's 127.0.0.1:41234", got)
	}
	var b adminAddr
	_, _ = b.Write([]byte("not json\n{\"msg\":\"admin listening\"}\n"))
	if b.get() != "" {
		t.Fatalf("address %q from lines that hold none", b.get())
	}
}

// The idle relays' database is named in either form of connection string,
// and nothing else in it changes.
func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:p@127.0.0.1:5432/bench?sslmode=disable", "postgres://u:p@127.0.0.1:5432/qb_idle?sslmode=disable"},
		{"postgresql://127.0.0.1", "postgresql://127.0.0.1/qb_idle"},
		{"host=/tmp dbname=bench user=u", "host=/tmp dbname=bench user=u dbname=qb_idle"},
	} {
		got, err := withDatabase(c.in, "qb_idle")
		if err != nil || got != c.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
