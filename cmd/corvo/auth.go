package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/auth"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// newAuthCmd is `corvo auth`: who the key acts as, and the API keys.
func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "API keys: who am I, create, list, disable, enable and revoke keys",
		Long: `Every client command sends the API key of --api-key, or else of
$CORVO_API_KEY. A server bound to loopback only (make run) needs none; one
that listens on other interfaces (or runs with --auth on) needs a key on
every call. With no key in the cluster, its first start writes an admin key
to <data-dir>/admin-key.`,
	}
	whoami := apiCommand("whoami", "Show who the API key acts as: name, namespace, role, queues", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/auth/whoami", nil, nil
		},
		render(printWhoAmI))
	cmd.AddCommand(whoami, newKeysCmd())
	return cmd
}

func printWhoAmI(w io.Writer, v *corvo.WhoAmI) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	name := v.Name
	if v.KeyID == "" {
		name += " (no key sent)"
	}
	fmt.Fprintf(tw, "auth\t%s\n", v.Auth)
	fmt.Fprintf(tw, "key\t%s\n", orDash(v.KeyID))
	fmt.Fprintf(tw, "name\t%s\n", name)
	fmt.Fprintf(tw, "namespace\t%s\n", v.Namespace)
	fmt.Fprintf(tw, "role\t%s\n", v.Role)
	fmt.Fprintf(tw, "queues\t%s\n", queuesText(v.Queues))
	fmt.Fprintf(tw, "permissions\t%s\n", strings.Join(v.Permissions, " "))
	return tw.Flush()
}

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Create, list, disable, enable and revoke API keys (needs an admin key)"}
	one := cobra.ExactArgs(1)
	list := apiCommand("list", "List the API keys (never the keys themselves)", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/auth/keys", nil, nil
		},
		render(func(w io.Writer, v *corvo.KeyList) error { return printKeys(w, v.Keys, time.Now()) }))
	revoke := apiCommand("revoke <key-id>", "Delete an API key: it stops working at once, everywhere", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", keyPath(a[0]), nil, nil
		},
		render(func(w io.Writer, v *corvo.KeyRevoked) error {
			_, err := fmt.Fprintf(w, "%s: revoked\n", v.ID)
			return err
		}))
	setEnabled := func(use, short string, enabled bool) *cobra.Command {
		return apiCommand(use+" <key-id>", short, one,
			func(_ *cobra.Command, a []string) (string, string, any, error) {
				return "PATCH", keyPath(a[0]), corvo.UpdateKeyRequest{Enabled: &enabled}, nil
			},
			render(func(w io.Writer, v *corvo.APIKey) error {
				_, err := fmt.Fprintf(w, "%s (%s): %s\n", v.ID, v.Name, enabledText(v.Enabled))
				return err
			}))
	}
	cmd.AddCommand(newKeyCreateCmd(), list, revoke,
		setEnabled("disable", "Turn an API key off until it is enabled again", false),
		setEnabled("enable", "Turn a disabled API key back on", true))
	return cmd
}

func keyPath(id string) string { return "/api/v1/auth/keys/" + url.PathEscape(id) }

func newKeyCreateCmd() *cobra.Command {
	var r corvo.CreateKeyRequest
	var expires string
	cmd := apiCommand("create", "Create an API key; the key is printed once, now", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			if r.Name == "" {
				return "", "", nil, fmt.Errorf("--name is required")
			}
			if !auth.ValidRole(r.Role) {
				return "", "", nil, fmt.Errorf("--role must be one of %s, not %q", strings.Join(auth.RoleNames, ", "), r.Role)
			}
			if expires != "" {
				at, err := parseExpiry(expires, time.Now())
				if err != nil {
					return "", "", nil, err
				}
				r.ExpiresAt = &at
			}
			return "POST", "/api/v1/auth/keys", r, nil
		},
		render(printCreatedKey))
	cmd.Example = `  corvo auth keys create --name billing-worker --role worker --queue 'billing.*'
  corvo auth keys create --name ci --role producer --expires 720h
  corvo auth keys create --name dashboard --role readonly -o json | jq -r .key`
	fl := cmd.Flags()
	fl.StringVar(&r.Name, "name", "", "what the key is for (required)")
	fl.StringVar(&r.Role, "role", auth.RoleReadonly, "one of "+strings.Join(auth.RoleNames, ", "))
	fl.StringVar(&r.Namespace, "namespace", "", "namespace the key acts in (default: the creating key's own)")
	fl.StringArrayVar(&r.Queues, "queue", nil, "queue glob the key may use (repeatable; none: every queue)")
	fl.StringVar(&expires, "expires", "", "when the key stops working: a duration from now (720h) or an RFC 3339 time")
	return cmd
}

// parseExpiry reads --expires: a duration from now or an RFC 3339 time.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--expires must be in the future, not %s", s)
		}
		return now.Add(d).UTC(), nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--expires is neither a duration (720h) nor an RFC 3339 time: %q", s)
	}
	return at, nil
}

func printCreatedKey(w io.Writer, k *corvo.CreatedKey) error {
	fmt.Fprintf(w, "Created API key %s (%s, role %s, namespace %s, queues %s, expires %s).\n\n",
		k.ID, k.Name, k.Role, k.Namespace, queuesText(k.Queues), timeText(k.ExpiresAt, "never"))
	fmt.Fprintf(w, "    %s\n\n", k.Key)
	_, err := fmt.Fprintf(w, "This is the only time the key is shown: store it now (e.g. as %s).\n", corvo.APIKeyEnv)
	return err
}

func printKeys(w io.Writer, keys []corvo.APIKey, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tNAMESPACE\tROLE\tQUEUES\tENABLED\tEXPIRES\tLAST USED")
	for _, k := range keys {
		enabled := enabledText(k.Enabled)
		if k.ExpiresAt != nil && !k.ExpiresAt.After(now) {
			enabled += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Namespace, k.Role, queuesText(k.Queues),
			enabled, timeText(k.ExpiresAt, "never"), timeText(k.LastUsedAt, "never"))
	}
	return tw.Flush()
}

func queuesText(qs []string) string {
	if len(qs) == 0 {
		return "*"
	}
	return strings.Join(qs, ",")
}

func enabledText(on bool) string {
	if on {
		return "yes"
	}
	return "no"
}

func timeText(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
