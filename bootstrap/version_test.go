package bootstrap

import (
	"runtime/debug"
	"testing"
)

// The commit of a build without -ldflags comes from what Go recorded.
func TestVCSCommit(t *testing.T) {
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "false"}}, "0123456"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}, "0123456-dirty"},
		{[]debug.BuildSetting{{Key: "GOOS", Value: "linux"}}, "unknown"},
		{nil, "unknown"},
	} {
		if got := vcsCommit(c.settings, "unknown"); got != c.want {
			t.Errorf("vcsCommit(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}
