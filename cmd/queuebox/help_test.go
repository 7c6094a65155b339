package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command has examples in its help, cobra's own (help, completion
// and its shells) too; --config is a flag of exactly the commands that
// read the configuration file, and of no other (version, help, dev, bench,
// completion, the groups that only hold subcommands).
func TestHelpHasExamplesAndConfigOnlyWhereRead(t *testing.T) {
	root := newRoot()
	reads := map[string]bool{
		"queuebox run": true, "queuebox migrate": true, "queuebox migrate up": true, "queuebox migrate status": true,
		"queuebox config check": true, "queuebox status": true, "queuebox replay": true,
		"queuebox dead list": true, "queuebox dead groups": true,
		"queuebox destinations list": true, "queuebox destinations pause": true, "queuebox destinations resume": true,
		"queuebox rows show": true, "queuebox healthcheck": true,
	}
	seen := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		seen++
		path := c.CommandPath()
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no examples", path)
		}
		for _, line := range strings.Split(c.Example, "\n") {
			if !strings.HasPrefix(line, "  ") {
				t.Errorf("%s: an example line not indented as cobra's help shows them: %q", path, line)
			}
		}
		if has := c.Flags().Lookup("config") != nil; has != reads[path] {
			t.Errorf("%s: --config %v, want %v", path, has, reads[path])
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen < 20 {
		t.Fatalf("walked %d commands; help and completion are not all there", seen)
	}
}

// bench's --seconds has no default of its own: each scenario has one (10 s
// of latency and producer, a 90 s long-transaction hold, an 8 s quiet
// spell), and a flag default would read as given and replace them all.
func TestBenchSecondsLeavesEachScenarioItsDefault(t *testing.T) {
	f := benchCmd().Flags().Lookup("seconds")
	if f == nil {
		t.Fatal("bench has no --seconds")
	}
	if f.DefValue != "0" {
		t.Errorf("--seconds defaults to %s; without the flag, long-transaction would hold for that long instead of 90 s", f.DefValue)
	}
	for _, d := range []string{"(default 10)", "(default 90)", "(default 8)"} {
		if !strings.Contains(f.Usage, d) {
			t.Errorf("--seconds' help does not give %s: %q", d, f.Usage)
		}
	}
}

// bench --help says what the table's comparisons mean, where a user
// reading the table looks for it.
func TestBenchHelpSaysWhatTheRatiosMean(t *testing.T) {
	t.Parallel()
	out, stderr, code := run(t, "bench", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"vs raw      a drain's rows/s over the raw loop's in the same run",
		"ratio       the scenario's own comparison: backlog and drain-held against drain-keys;",
		"replicas, three\n              processes against one",
		"vs ceiling  a broker's relay against a plain publisher of the same client library",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bench --help lacks %q:\n%s", want, out)
		}
	}
}
