package main

import (
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// newNamespacesCmd is `corvo namespaces`: list, create and delete
// namespaces (an admin key's business).
func newNamespacesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "namespaces",
		Aliases: []string{"ns"},
		Short:   "List, create and delete namespaces (needs an admin key)",
		Long: `A namespace is a tenant: its queues, jobs, schedules, batches and keys are
its own, and two namespaces may both have a queue named "emails". A key acts
in its own namespace; an admin key acts in the one --namespace (or
$CORVO_NAMESPACE) names, e.g.

  corvo --namespace acme queues
  corvo --namespace acme search --queue emails --state dead`,
	}
	list := apiCommand("list", "List the namespaces with how many API keys each has", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/namespaces", nil, nil
		},
		render(func(w io.Writer, v *corvo.NamespaceList) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEYS\tCREATED\tDESCRIPTION")
			for _, n := range v.Namespaces {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", n.Name, n.Keys, timeText(n.CreatedAt, "-"), n.Description)
			}
			return tw.Flush()
		}))
	var desc string
	create := apiCommand("create <name>", "Create a namespace (1–63 of a-z, 0-9, - and _)", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", "/api/v1/namespaces", corvo.CreateNamespaceRequest{Name: a[0], Description: desc}, nil
		},
		render(func(w io.Writer, v *corvo.Namespace) error {
			_, err := fmt.Fprintf(w, "%s: created\n", v.Name)
			return err
		}))
	create.Flags().StringVar(&desc, "description", "", "what the namespace is for")
	del := apiCommand("delete <name>", "Delete an empty namespace (no key, queue or schedule left)", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", "/api/v1/namespaces/" + url.PathEscape(a[0]), nil, nil
		},
		render(func(w io.Writer, v *corvo.NamespaceDeleted) error {
			_, err := fmt.Fprintf(w, "%s: deleted\n", v.Name)
			return err
		}))
	cmd.AddCommand(list, create, del)
	return cmd
}
