package main

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel SIGKILL cmd's process when the test binary
// goes (a timeout, ^C, a crash): a cluster's servers would otherwise
// outlive it, holding their ports and the CPU the next run measures with.
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
