package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/internal/testbin"
)

const unitFile = "systemd/queuebox.service"

// unitSettings reads a unit file's [Service] settings, each key with its
// values in order (a key may be given more than once).
func unitSettings(t *testing.T, text string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not key=value", unitFile, line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

// The unit runs the relay with its configuration file, restarts it on
// failure (but not on a configuration error, which a restart cannot fix),
// gives it more time to stop than the default drain timeout, and sandboxes
// it. systemd-analyze, where it is installed, finds nothing to say about
// the file, and rates its exposure OK.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	s := unitSettings(t, string(b))
	want := map[string]string{
		"Service.ExecStart":                "/usr/local/bin/queuebox run --config /etc/queuebox/queuebox.yaml",
		"Service.Restart":                  "on-failure",
		"Service.RestartPreventExitStatus": "2",
		"Service.KillSignal":               "SIGTERM",
		"Service.DynamicUser":              "yes",
		"Service.NoNewPrivileges":          "yes",
		"Service.ProtectSystem":            "strict",
		"Service.ProtectHome":              "yes",
		"Service.PrivateTmp":               "yes",
		"Service.PrivateDevices":           "yes",
		"Service.CapabilityBoundingSet":    "",
		"Service.RestrictAddressFamilies":  "AF_INET AF_INET6 AF_UNIX",
		"Service.MemoryDenyWriteExecute":   "yes",
		"Install.WantedBy":                 "multi-user.target",
	}
	for k, v := range want {
		if got := s[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s: %s = %q, want %q", unitFile, k, got, v)
		}
	}
	stop, err := time.ParseDuration(strings.Join(s["Service.TimeoutStopSec"], ""))
	if drain := time.Duration(bootstrap.Defaults().Shutdown.DrainTimeoutMs) * time.Millisecond; err != nil || stop <= drain {
		t.Errorf("%s: TimeoutStopSec %q (%v): want a duration above the default drain timeout, %s", unitFile, s["Service.TimeoutStopSec"], err, drain)
	}

	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (scripts/install-podman.sh installs it, with systemd): the unit is not verified")
	}
	// verify checks that ExecStart's program exists: a copy of the unit
	// runs the binary the tests built.
	unit := filepath.Join(t.TempDir(), "queuebox.service")
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/queuebox ", "ExecStart="+testbin.Path(t)+" ", 1)
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}

	out, err = exec.Command(tool, "security", "--offline=yes", unit).CombinedOutput()
	if err != nil && strings.Contains(string(out), "--offline") {
		t.Skipf("this systemd-analyze has no offline security analysis (systemd 250 and later): %s", out)
	}
	m := regexp.MustCompile(`Overall exposure level for queuebox\.service: ([0-9.]+) (\S+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	level, _ := strconv.ParseFloat(m[1], 64)
	if level > 2.0 {
		t.Errorf("systemd rates the unit's exposure %s (%s), want 2.0 or less; what it counts against it:\n%s", m[1], m[2], exposures(string(out)))
	}
	t.Logf("exposure %s %s", m[1], m[2])
}

// exposures lists the lines of systemd-analyze security that count.
func exposures(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "✗") {
			fmt.Fprintln(&b, strings.Join(strings.Fields(line), " "))
		}
	}
	return b.String()
}
