package main

import (
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// corvo budgets: /api/v1/budgets.
func newBudgetsCmd() *cobra.Command {
	list := apiCommand("list", "List the budgets with today's spend", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/budgets", nil, nil
		},
		render(func(w io.Writer, v *struct {
			Budgets []corvo.Budget `json:"budgets"`
		}) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCOPE\tDAILY USD\tPER JOB USD\tON EXCEED\tSPENT TODAY\tEXCEEDED")
			for _, b := range v.Budgets {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", b.Scope, usdOr(b.DailyUSD), usdOr(b.PerJobUSD), b.OnExceed, usd(b.SpentUSD), b.Exceeded)
			}
			return tw.Flush()
		}))
	var daily, perJob float64
	var onExceed string
	set := apiCommand("set <scope>", "Create or replace a budget: scope queue:<name>, tag:<key>=<value> or global", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a []string) (string, string, any, error) {
			body := corvo.BudgetRequest{Scope: a[0], OnExceed: onExceed}
			if cmd.Flags().Changed("daily-usd") {
				body.DailyUSD = &daily
			}
			if cmd.Flags().Changed("per-job-usd") {
				body.PerJobUSD = &perJob
			}
			if body.DailyUSD == nil && body.PerJobUSD == nil {
				return "", "", nil, fmt.Errorf("give --daily-usd, --per-job-usd or both")
			}
			return "PUT", "/api/v1/budgets", body, nil
		}, render(func(w io.Writer, b *corvo.Budget) error {
			_, err := fmt.Fprintf(w, "%s: daily %s, per job %s, on exceed %s\n", b.Scope, usdOr(b.DailyUSD), usdOr(b.PerJobUSD), b.OnExceed)
			return err
		}))
	set.Flags().Float64Var(&daily, "daily-usd", 0, "most a UTC day's usage under the budget may cost")
	set.Flags().Float64Var(&perJob, "per-job-usd", 0, "most one job may cost (its heartbeats hear budget_exceeded past it)")
	set.Flags().StringVar(&onExceed, "on-exceed", "hold", "what new jobs meet once the day is spent: hold, reject or alert_only")
	del := apiCommand("delete <scope>", "Delete a budget", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", "/api/v1/budgets/" + url.PathEscape(a[0]), nil, nil
		}, func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	cmd := &cobra.Command{Use: "budgets", Short: "Cost budgets: list, set, delete", Args: cobra.NoArgs,
		Example: `  corvo budgets
  corvo budgets set queue:agents.research --daily-usd 100 --per-job-usd 2.5
  corvo budgets set tag:tenant=acme --daily-usd 50 --on-exceed reject
  corvo budgets delete global -o json`,
		RunE: func(cmd *cobra.Command, args []string) error { return list.RunE(cmd, args) }}
	cmd.AddCommand(list, set, del)
	cmd.Flags().AddFlagSet(list.Flags())
	return cmd
}

// usdOr prints a limit, "-" when it is not set.
func usdOr(v *float64) string {
	if v == nil {
		return "-"
	}
	return usd(*v)
}
