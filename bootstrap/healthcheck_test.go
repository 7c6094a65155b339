package bootstrap

import (
	"strings"
	"testing"
)

// The health check asks a listener on every interface on loopback, and
// refuses a port the relay picks when it starts.
func TestReadyURLAsksLoopbackForEveryInterface(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/readyz",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/readyz",
		":9090":          "http://127.0.0.1:9090/readyz",
		"[::]:8080":      "http://[::1]:8080/readyz",
		"[::1]:8080":     "http://[::1]:8080/readyz",
		"localhost:8081": "http://localhost:8081/readyz",
	} {
		l := &Loaded{Config: Defaults()}
		l.Admin.Listen = listen
		got, err := ReadyURL(l)
		if err != nil || got != want {
			t.Errorf("admin.listen %s: %q, %v; want %q", listen, got, err, want)
		}
	}
	l := &Loaded{Config: Defaults()}
	l.Admin.Listen = "127.0.0.1:0"
	if _, err := ReadyURL(l); err == nil || !strings.Contains(err.Error(), "give admin.listen a fixed port") {
		t.Errorf("port 0: %v", err)
	}
}
