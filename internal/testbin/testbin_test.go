package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The binary is built into a folder of its own in the temporary folder
// (the one scripts/test.sh gives the run, when it runs the tests), runs,
// and Remove takes the folder away.
func TestPathBuildsIntoTheTemporaryFolderAndRemoveDeletesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	p := Path(t)
	if !strings.HasPrefix(p, filepath.Clean(os.TempDir())+string(filepath.Separator)) {
		t.Errorf("the binary is at %s, outside the temporary folder %s", p, os.TempDir())
	}
	if out, err := exec.Command(p, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "queuebox ") {
		t.Fatalf("the binary: %v %s", err, out)
	}
	Remove()
	if _, err := os.Stat(filepath.Dir(p)); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s: %v", filepath.Dir(p), err)
	}
}
