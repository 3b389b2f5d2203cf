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

// corvo usage: GET /api/v1/usage/summary.
func newUsageCmd() *cobra.Command {
	var period, groupBy string
	cmd := apiCommand("usage", "Show the tokens and cost workers reported, by queue, model, provider or tag", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			q := url.Values{}
			q.Set("period", period)
			if groupBy != "" {
				q.Set("group_by", groupBy)
			}
			return "GET", "/api/v1/usage/summary?" + q.Encode(), nil, nil
		},
		render(func(w io.Writer, s *corvo.UsageSummary) error { return printUsage(w, s, groupBy) }))
	cmd.Example = `  corvo usage
  corvo usage --period 7d --group-by model
  corvo usage --period 30d --group-by tag:tenant -o json`
	cmd.Flags().StringVar(&period, "period", "24h", "period counted back from now: 24h, 7d or 30d")
	cmd.Flags().StringVar(&groupBy, "group-by", "", "group by queue, model, provider, tag:<key>, or hour or day (spend over time, oldest first) (default: totals only)")
	return cmd
}

func printUsage(w io.Writer, s *corvo.UsageSummary, groupBy string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := strings.ToUpper(groupBy)
	if head == "" {
		head = "TOTAL"
	}
	if _, err := fmt.Fprintln(tw, head+"\tINPUT\tOUTPUT\tCACHE WRITE\tCACHE READ\tCOST USD\tJOBS\tUSD/JOB"); err != nil {
		return err
	}
	row := func(key string, t *corvo.UsageTotals) error {
		_, err := fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", key, t.InputTokens, t.OutputTokens, t.CacheCreationTokens,
			t.CacheReadTokens, usd(t.CostUSD), t.Jobs, usd(t.CostPerJobUSD))
		return err
	}
	for i := range s.Groups {
		g := &s.Groups[i]
		key := "(none)"
		if g.Key != nil {
			key = *g.Key
		}
		if err := row(key, &g.UsageTotals); err != nil {
			return err
		}
	}
	if groupBy != "" {
		head = "total"
	} else {
		head = "last " + s.Period
	}
	if err := row(head, &s.Totals); err != nil {
		return err
	}
	return tw.Flush()
}

// usd prints dollars with the precision they were reported to.
func usd(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
