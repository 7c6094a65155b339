package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/queuebox/queuebox/internal/testrabbit"
)

// TestMain stops the private RabbitMQ node (if a test started one) and
// removes the binary the tests built.
func TestMain(m *testing.M) {
	code := testrabbit.Run(m)
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds the real queuebox once per test run.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "queuebox-bin-"); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "queuebox"), "github.com/queuebox/queuebox/cmd/queuebox").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "queuebox")
}
