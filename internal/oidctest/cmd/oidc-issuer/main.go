// Command oidc-issuer serves the test OpenID Connect issuer of package
// oidctest on loopback, for the UI's browser tests: it logs one configured
// user in at once. Never for production.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/corvohq/corvo/internal/oidctest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	clientID := flag.String("client-id", "corvo", "the client ID it accepts")
	secret := flag.String("client-secret", "", "the client secret it accepts")
	sub := flag.String("sub", "user-1", "the user's subject")
	email := flag.String("email", "user@example.test", "the user's email claim")
	name := flag.String("name", "", "the user's name claim")
	groups := flag.String("groups", "", "the user's groups, comma-separated")
	flag.Parse()

	host, _, err := net.SplitHostPort(*addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		fmt.Fprintln(os.Stderr, "oidc-issuer: --addr must be a loopback host:port")
		os.Exit(2)
	}
	var gs []string
	if *groups != "" {
		gs = strings.Split(*groups, ",")
	}
	iss, err := oidctest.New(oidctest.Config{ClientID: *clientID, ClientSecret: *secret,
		User: oidctest.User{Subject: *sub, Email: *email, Name: *name, Groups: gs}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "oidc-issuer:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oidc-issuer:", err)
		os.Exit(1)
	}
	iss.URL = "http://" + ln.Addr().String()
	fmt.Println(iss.URL) // the caller reads the issuer URL from the first line
	if err := http.Serve(ln, iss.Handler()); err != nil {
		fmt.Fprintln(os.Stderr, "oidc-issuer:", err)
		os.Exit(1)
	}
}
