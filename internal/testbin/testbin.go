// Package testbin builds the real queuebox binary once per test process,
// for the tests that run it as a separate process. It goes into a folder
// of its own in the temporary folder: the TestMain of every package that
// calls Path removes it (Remove), and under scripts/test.sh (make test)
// the temporary folder is the run's own, removed with it, so that even a
// test binary killed by -timeout leaves no binary behind.
//
// It is built as the container image's binary is (scripts/build-image.sh):
// static (CGO_ENABLED=0) and with -trimpath, so that the tests run what the
// image ships, and so that the image's build reuses the packages compiled
// here and only links.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Path builds the binary the first time it is called and returns where it
// is; a build that failed fails every test that asks.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, e := os.MkdirTemp("", "queuebox-bin-")
		if e != nil {
			err = e
			return
		}
		path = filepath.Join(dir, "queuebox")
		cmd := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/queuebox/queuebox/cmd/queuebox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("go build: %v\n%s", e, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Remove deletes the binary if one was built (from TestMain, after the
// tests).
func Remove() {
	if path != "" {
		_ = os.RemoveAll(filepath.Dir(path))
	}
}
