package pgcluster

import (
	"os"
	"os/exec"
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
