package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// DefaultHealthcheckTimeout bounds `queuebox healthcheck`'s request. It is
// above the 3 seconds that /readyz gives its own ping of the database, so
// that a slow database is reported with the relay's reason rather than as
// no answer at all.
const DefaultHealthcheckTimeout = 5 * time.Second

// ReadyURL is the /readyz route of the admin listener that l configures, as
// a process of the same machine (or container) reaches it: a listener on
// every interface (0.0.0.0, ::, or no host) is asked on loopback. A port of
// 0 cannot be asked: the relay picks a free port when it starts.
func ReadyURL(l *Loaded) (string, error) {
	host, port, err := net.SplitHostPort(l.Admin.Listen)
	if err != nil {
		return "", fmt.Errorf("admin.listen %q is not host:port", l.Admin.Listen)
	}
	if port == "0" {
		return "", fmt.Errorf("admin.listen %q has port 0: the relay picks a free port when it starts, which the health check cannot know; give admin.listen a fixed port (such as 127.0.0.1:8080)", l.Admin.Listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

// Healthcheck is `queuebox healthcheck`: it asks the admin listener of the
// relay that runs with l for readiness (GET /readyz, with admin.token when
// one is set) and returns what the relay answered, and where, when it is
// ready. Any
// other outcome is an ExitError of code 1 that says why: no relay answers,
// the relay is not ready (its own reason: the database, the schema, a
// drain), or the token does not match. Code 1 also covers a configuration
// that names no address to ask: a health check's caller (Docker, ECS, a
// Kubernetes exec probe) reads 0 as healthy and anything else as not, and
// Docker reserves 2.
func Healthcheck(ctx context.Context, l *Loaded, timeout time.Duration) (string, error) {
	fail := func(format string, args ...any) error {
		return &ExitError{Code: 1, Err: fmt.Errorf(format, args...)}
	}
	url, err := ReadyURL(l)
	if err != nil {
		return "", fail("%w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fail("admin.listen %q: %w", l.Admin.Listen, err)
	}
	if l.Admin.Token != "" {
		req.Header.Set("Authorization", "Bearer "+l.Admin.Token)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return "", fail("not ready: the relay at %s did not answer within %s", url, timeout)
		case errors.Is(err, syscall.ECONNREFUSED):
			return "", fail("not ready: nothing listens at %s (admin.listen of %s): the relay is not running, or runs with another admin.listen", url, l.File)
		}
		return "", fail("not ready: %s could not be asked: %v", url, err)
	}
	defer res.Body.Close()
	body := answerText(res)
	switch {
	case res.StatusCode == http.StatusOK:
		return fmt.Sprintf("%s (%s answered %d)", body, url, res.StatusCode), nil
	case res.StatusCode == http.StatusUnauthorized && l.Admin.Token == "":
		what := "admin.token is empty here"
		for _, p := range l.Unset {
			if p.Key == "admin.token" {
				what = "admin.token is empty here (" + p.Reason + ")"
			}
		}
		return "", fail("the relay at %s wants the admin token, and %s; run the health check with the relay's environment", url, what)
	case res.StatusCode == http.StatusUnauthorized:
		return "", fail("the relay at %s refused the token (%s); the health check reads admin.token from %s and its environment, as the relay does: give it the relay's", url, body, l.File)
	}
	return "", fail("not ready: %s (%s answered %d)", strings.TrimPrefix(body, "not ready: "), url, res.StatusCode)
}

// answerText is the admin listener's answer in one line: /readyz answers
// plain text, the token check a JSON error.
func answerText(res *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	var je struct {
		Error string `json:"error"`
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") && json.Unmarshal(b, &je) == nil && je.Error != "" {
		return je.Error
	}
	return strings.Join(strings.Fields(string(b)), " ")
}
