// Command corvo is the Corvo job server and its command-line client.
package main

import (
	"errors"
	"fmt"
	"os"
	_ "time/tzdata" // every node computes cron times from the same tz database

	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/internal/membudget"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit codes scripts can rely on.
const (
	exitOK       = 0
	exitError_   = 1 // the request failed (server error, network, conflict …)
	exitUsage    = 2 // bad flags or arguments
	exitNotFound = 3 // the job (or other object) does not exist
)

// traceCommand, when set (builds with -tags corvotest), is told which
// command is about to run: the tests use it to prove every command ran.
var traceCommand func(*cobra.Command)

func main() {
	root := newRootCmd()
	if c, _, err := root.Find(os.Args[1:]); err == nil && c.Name() == "server" {
		// Before anything is opened: a server runs without glibc's
		// per-thread malloc cache, which keeps what a burst freed
		// (internal/membudget/tcache.go). Returns when it did not re-run.
		membudget.ReexecWithoutTcache()
	}
	if traceCommand != nil {
		if c, _, err := root.Find(os.Args[1:]); err == nil {
			traceCommand(c)
		}
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(exitUsage)
	}
}

// clientOnlyFlags are the root's persistent flags that only client
// commands read: `corvo server --help` does not list them.
var clientOnlyFlags = []string{"tls-ca", "api-key", "namespace"}

func newRootCmd() *cobra.Command {
	var tlsCA string
	server := newServerCmd()
	root := &cobra.Command{
		Use:           "corvo",
		Short:         "Corvo: a job server for every language over HTTP/JSON",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// The server makes no client calls: a CORVO_TLS_CA in its
			// environment (a container's, for its health check) is not
			// its to read.
			if tlsCA == "" || cmd == server {
				return nil
			}
			return trustCA(tlsCA)
		},
	}
	root.PersistentFlags().StringVar(&tlsCA, "tls-ca", os.Getenv("CORVO_TLS_CA"),
		"client commands: PEM file of the CA to trust for an https:// --url whose certificate no system CA issued (default $CORVO_TLS_CA)")
	server.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, name := range clientOnlyFlags {
			_ = c.Root().PersistentFlags().MarkHidden(name) // help ends the process
		}
		root.HelpFunc()(c, args)
	})
	root.AddCommand(server, newEnqueueCmd(), newInspectCmd(), newBenchCmd())
	root.AddCommand(newJobCmds()...)
	root.AddCommand(newQueueCmds()...)
	root.AddCommand(newListCmds()...)
	root.AddCommand(newSearchCmd(), newBulkCmd(), newClusterCmd(), newTopCmd(), newAuthCmd())
	root.PersistentFlags().StringVar(&apiKeyFlag, "api-key", "", "API key the client commands send (default $"+corvo.APIKeyEnv+")")
	root.PersistentFlags().StringVar(&namespaceFlag, "namespace", "", "namespace the client commands act in (default $"+corvo.NamespaceEnv+", else the key's own; another needs an admin key)")
	root.AddCommand(newNamespacesCmd())
	root.AddCommand(newAuditCmd(), newBackupCmd(), newRestoreCmd())
	root.AddCommand(newUsageCmd(), newBudgetsCmd(), newProvidersCmd())
	root.AddCommand(newScoresCmd())
	return root
}
