package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Makefile's -ldflags stamp the version and commit into the binary:
// the variables it names exist where it names them (a -X for a name that
// does not exist is silently ignored by the linker).
func TestMakefileStampsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:=\s*(.+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no LDFLAGS")
	}
	flags := strings.NewReplacer("$(VERSION)", "v9.8.7-test", "$(COMMIT)", "abc1234-test").Replace(string(m[1]))
	bin := filepath.Join(t.TempDir(), "queuebox")
	if out, err := exec.Command("go", "build", "-ldflags", flags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", flags, err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "queuebox v9.8.7-test\ncommit abc1234-test\n") {
		t.Fatalf("version with the Makefile's -ldflags %q:\n%s", flags, out)
	}
}
