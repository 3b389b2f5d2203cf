package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// corvo scores summary|compare: GET /api/v1/scores/summary and /compare.
func newScoresCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scores",
		Short: "Summarise the scores of job results (mean, p50, p5, count per dimension)",
	}
	cmd.AddCommand(newScoresSubCmd(false), newScoresSubCmd(true))
	return cmd
}

func newScoresSubCmd(compare bool) *cobra.Command {
	var c clientFlags
	var queue, period, scorer, groupBy string
	cmd := &cobra.Command{
		Use:     "summary",
		Short:   "Per dimension, the scores posted in a period",
		Example: "  corvo scores summary --queue llm.summarize --period 7d\n  corvo scores summary --scorer human:ann -o json",
		Args:    cobra.NoArgs,
	}
	if compare {
		cmd.Use, cmd.Short = "compare", "The same per value of a tag, for A/B tests of prompts"
		cmd.Example = "  corvo scores compare --group-by tag:prompt_version --queue llm.summarize"
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := c.validate(); err != nil {
			return err
		}
		q := url.Values{}
		q.Set("period", period)
		for k, v := range map[string]string{"queue": queue, "scorer": scorer} {
			if v != "" {
				q.Set(k, v)
			}
		}
		path := "/api/v1/scores/summary?"
		if compare {
			path = "/api/v1/scores/compare?"
			q.Set("group_by", groupBy)
		}
		out, _, err := c.call("GET", path+q.Encode(), nil)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if c.output == "json" {
			_, err = fmt.Fprintln(w, strings.TrimSpace(string(out)))
			return err
		}
		var groups []corvo.ScoresGroup
		if compare {
			var s corvo.ScoresComparison
			if err := json.Unmarshal(out, &s); err != nil {
				return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
			}
			groups = s.Groups
		} else {
			var s corvo.ScoresSummary
			if err := json.Unmarshal(out, &s); err != nil {
				return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
			}
			groups = []corvo.ScoresGroup{{Dimensions: s.Dimensions}}
		}
		return printScores(w, groups, compare)
	}
	c.register(cmd)
	cmd.Flags().StringVar(&queue, "queue", "", "only the jobs of this queue")
	cmd.Flags().StringVar(&period, "period", "7d", "period counted back from now: 24h, 7d or 30d")
	cmd.Flags().StringVar(&scorer, "scorer", "", "only the scores of this scorer")
	if compare {
		cmd.Flags().StringVar(&groupBy, "group-by", "", "tag:<key>: a group per value of the tag (required)")
	}
	return cmd
}

func printScores(w io.Writer, groups []corvo.ScoresGroup, compare bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "DIMENSION\tMEAN\tP50\tP5\tCOUNT"
	if compare {
		head = "GROUP\t" + head
	}
	if _, err := fmt.Fprintln(tw, head); err != nil {
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, g := range groups {
		names := make([]string, 0, len(g.Dimensions))
		for n := range g.Dimensions {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			d := g.Dimensions[n]
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%d", n, num(d.Mean), num(d.P50), num(d.P5), d.Count)
			if compare {
				key := "(none)"
				if g.Key != nil {
					key = *g.Key
				}
				line = key + "\t" + line
			}
			if _, err := fmt.Fprintln(tw, line); err != nil {
				return err
			}
		}
	}
	return tw.Flush()
}
