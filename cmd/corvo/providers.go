package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// corvo providers: /api/v1/providers and a queue's link to one.
func newProvidersCmd() *cobra.Command {
	list := apiCommand("list", "List the providers: limits, linked queues, the last minute's use and each shard's share", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/providers", nil, nil
		},
		render(func(w io.Writer, v *struct {
			Providers []corvo.Provider `json:"providers"`
		}) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRPM\tINPUT TPM\tOUTPUT TPM\tREQUESTS (1m)\tINPUT (1m)\tOUTPUT (1m)\tQUEUES\tSHARES")
			for _, p := range v.Providers {
				shares := make([]string, 0, len(p.Shares))
				for _, s := range p.Shares {
					shares = append(shares, fmt.Sprintf("%d:%s", s.Shard, limitOr(s.RPM)))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Name, limitOr(p.RPMLimit), limitOr(p.InputTPMLimit), limitOr(p.OutputTPMLimit),
					p.Window.Requests, p.Window.InputTokens, p.Window.OutputTokens, strings.Join(p.Queues, ","), strings.Join(shares, " "))
			}
			return tw.Flush()
		}))
	var rpm, inTPM, outTPM int64
	set := apiCommand("set <name>", "Create a provider or change its limits (per minute; 0: none)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a []string) (string, string, any, error) {
			body := corvo.ProviderRequest{Name: a[0]}
			for _, f := range []struct {
				flag string
				v    *int64
				dst  **int64
			}{{"rpm", &rpm, &body.RPMLimit}, {"input-tpm", &inTPM, &body.InputTPMLimit}, {"output-tpm", &outTPM, &body.OutputTPMLimit}} {
				if cmd.Flags().Changed(f.flag) {
					*f.dst = f.v
				}
			}
			if body.RPMLimit == nil && body.InputTPMLimit == nil && body.OutputTPMLimit == nil {
				return "", "", nil, fmt.Errorf("give --rpm, --input-tpm, --output-tpm or several")
			}
			return "PUT", "/api/v1/providers", body, nil
		}, render(func(w io.Writer, p *corvo.Provider) error {
			_, err := fmt.Fprintf(w, "%s: rpm %s, input tpm %s, output tpm %s\n", p.Name, limitOr(p.RPMLimit), limitOr(p.InputTPMLimit), limitOr(p.OutputTPMLimit))
			return err
		}))
	set.Flags().Int64Var(&rpm, "rpm", 0, "requests (jobs handed out) per minute over every linked queue")
	set.Flags().Int64Var(&inTPM, "input-tpm", 0, "input tokens per minute the linked queues' jobs may report")
	set.Flags().Int64Var(&outTPM, "output-tpm", 0, "output tokens per minute the linked queues' jobs may report")
	del := apiCommand("delete <name>", "Delete a provider (its queues are unlinked)", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", "/api/v1/providers/" + url.PathEscape(a[0]), nil, nil
		}, func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	link := apiCommand("link <queue> <provider>", "Link a queue to a provider (\"\" unlinks it)", cobra.ExactArgs(2),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			var p any
			if a[1] != "" {
				p = a[1]
			}
			return "POST", "/api/v1/queues/" + url.PathEscape(a[0]) + "/provider", map[string]any{"provider": p}, nil
		}, render(func(w io.Writer, l *corvo.QueueProvider) error {
			if l.Provider == nil {
				_, err := fmt.Fprintf(w, "%s: no provider\n", l.Queue)
				return err
			}
			_, err := fmt.Fprintf(w, "%s: provider %s\n", l.Queue, *l.Provider)
			return err
		}))
	cmd := &cobra.Command{Use: "providers", Short: "Model providers' rate limits: list, set, delete, link", Args: cobra.NoArgs,
		Example: `  corvo providers
  corvo providers set anthropic --rpm 4000 --input-tpm 400000 --output-tpm 80000
  corvo providers link llm.chat anthropic
  corvo providers link llm.chat ""
  corvo providers delete anthropic -o json`,
		RunE: func(cmd *cobra.Command, args []string) error { return list.RunE(cmd, args) }}
	cmd.AddCommand(list, set, del, link)
	cmd.Flags().AddFlagSet(list.Flags())
	return cmd
}

// limitOr prints a limit, "-" when it is not set.
func limitOr(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
