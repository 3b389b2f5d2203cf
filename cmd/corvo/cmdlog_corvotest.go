//go:build corvotest

package main

import (
	"os"

	"github.com/spf13/cobra"
)

// Test builds append every command they run to $CORVO_CMD_LOG, one
// command path per line (see TestMain).
func init() {
	traceCommand = func(c *cobra.Command) {
		p := os.Getenv("CORVO_CMD_LOG")
		if p == "" {
			return
		}
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		_, _ = f.WriteString(c.CommandPath() + "\n")
	}
}
