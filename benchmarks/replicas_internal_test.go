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
