//go:build !linux

package main

import "os/exec"

// dieWithTest: only Linux has a parent-death signal.
func dieWithTest(*exec.Cmd) {}
