package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A process of another user (pid 1, for anyone but root) counts as alive:
// kill(pid, 0) refuses it with EPERM, which does not mean it is gone. A
// process that has exited does not.
func TestAliveKnowsRunningAndEndedProcesses(t *testing.T) {
	if !alive(os.Getpid()) || !alive(1) {
		t.Fatal("a running process (this one, or pid 1) counted as ended")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if alive(cmd.Process.Pid) {
		t.Fatalf("process %d has exited and was reaped, but counted as alive", cmd.Process.Pid)
	}
}

// The folder of a cluster whose owner ended (a `queuebox dev` killed with
// SIGKILL: its server died with it and left no pid file) goes at the next
// start; one whose owner still runs stays, and so does a fresh folder
// without an owner (another process may be making it).
func TestRemoveStaleTakesTheFoldersOfEndedOwners(t *testing.T) {
	prefix := fmt.Sprintf("queuebox-stale-test-%d-", os.Getpid())
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(owner int) string {
		d, err := os.MkdirTemp("/tmp", prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner > 0 {
			if err := os.WriteFile(filepath.Join(d, "owner"), []byte(strconv.Itoa(owner)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	orphan, mine, unowned := mk(ended.Process.Pid), mk(os.Getpid()), mk(0)
	RemoveStale(prefix)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("the folder of an ended owner is still there (%v)", err)
	}
	for _, d := range []string{mine, unowned} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
