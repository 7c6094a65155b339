package bootstrap

import "runtime/debug"

// Version information, set by the build: the Makefile passes
// -ldflags "-X github.com/queuebox/queuebox/bootstrap.Version=... -X
// github.com/queuebox/queuebox/bootstrap.Commit=...", so these two names
// and this package's path must not change without it. Version is the
// release tag ("dev" for a build that is not one), Commit the commit it was
// built from. A build without the flags (go install, go build) takes the
// commit from what the Go toolchain recorded, when it built in a checkout.
var (
	Version = "dev"
	Commit  = "unknown"
)

func init() {
	if Commit == "unknown" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			Commit = vcsCommit(bi.Settings, Commit)
		}
	}
}

// vcsCommit is the short revision of the build settings, with -dirty when
// the tree had changes, or else fallback.
func vcsCommit(settings []debug.BuildSetting, fallback string) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return fallback
	}
	rev = rev[:min(len(rev), 7)]
	if dirty {
		rev += "-dirty"
	}
	return rev
}
