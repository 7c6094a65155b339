// Package testbin builds the real queuebox binary once per test process,
// for the tests that run it as a separate process. It goes into a folder
// of its own in the temporary folder: the TestMain of every package that
// calls Path removes it (Remove), and under scripts/test.sh (make test)
// the temporary folder is the run's own, removed with it, so that even a
// test binary killed by -timeout leaves no binary behind.
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
		if out, e := exec.Command("go", "build", "-o", path, "github.com/queuebox/queuebox/cmd/queuebox").CombinedOutput(); e != nil {
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
