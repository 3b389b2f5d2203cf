package gateway

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// docRow renders a row of the error table as docs/api.md lists it.
func docRow(c *errorCode) string {
	st := []string{strconv.Itoa(c.Status)}
	for _, a := range c.Also {
		st = append(st, strconv.Itoa(a))
	}
	return "| " + strings.Join(st, " / ") + " | `" + c.Code + "` | " + c.Meaning + " |"
}

func TestErrorTableIsWellFormed(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range errorCodes {
		if seen[c.Code] {
			t.Errorf("code %q is in the table twice", c.Code)
		}
		seen[c.Code] = true
		if c.Status < 300 || c.Status > 599 || c.Meaning == "" || !regexp.MustCompile(`^[a-z][a-z_]*$`).MatchString(c.Code) {
			t.Errorf("malformed row %+v", *c)
		}
	}
	// Every row variable of errors.go is in errorCodes.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if cl, ok := n.(*ast.CompositeLit); ok {
			if id, ok := cl.Type.(*ast.Ident); ok && id.Name == "errorCode" {
				for _, e := range cl.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Code" {
						code, _ := strconv.Unquote(kv.Value.(*ast.BasicLit).Value)
						if !seen[code] {
							t.Errorf("errors.go declares code %q but errorCodes does not list it", code)
						}
					}
				}
			}
		}
		return true
	})
	e := codeJoinFailed.err("x").withStatus(503)
	if e.status != 503 {
		t.Errorf("join_failed withStatus(503) = %d", e.status)
	}
	if e := codeNotFound.err("x").withStatus(500); e.status != 404 {
		t.Errorf("not_found withStatus(500) = %d, want its own 404", e.status)
	}
}

// TestEveryEmittedCodeIsInTheTable: outside errors.go, no gateway source
// builds an apiError by hand or writes a "code" member from a string
// literal, and the peer package (whose errors the gateway relays) names
// codes only through the SDK's constants, which mirror the table; so every
// code a node sends comes from a row of the table.
func TestEveryEmittedCodeIsInTheTable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	peerFiles, err := filepath.Glob("../peer/*.go")
	if err != nil || len(peerFiles) == 0 {
		t.Fatalf("no peer sources: %v", err)
	}
	files = append(files, peerFiles...)
	codeLit := regexp.MustCompile(`"code"\s*:\s*"`)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "errors.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && (id.Name == "apiError" || id.Name == "errorCode") {
					t.Errorf("%s: %s{…} built outside errors.go: use a row of the error table", fset.Position(n.Pos()), id.Name)
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						key, _ := kv.Key.(*ast.Ident)
						if lit, ok := kv.Value.(*ast.BasicLit); ok && key != nil && key.Name == "Code" && lit.Kind == token.STRING {
							t.Errorf("%s: Code: %s written from a literal: use the SDK's Code constant (a row of the table)", fset.Position(kv.Pos()), lit.Value)
						}
					}
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING && codeLit.MatchString(n.Value) {
					t.Errorf("%s: a \"code\" written from a literal (%s): use a row of the error table", fset.Position(n.Pos()), n.Value)
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}

// docErrorRows reads the table under "## Errors" in docs/api.md.
func docErrorRows(t *testing.T) []string {
	f, err := os.Open("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Errors":
			in = true
		case in && strings.HasPrefix(line, "## "):
			return rows
		case in && strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| status"):
			rows = append(rows, line)
		}
	}
	return rows
}

// TestErrorTableMatchesDocs: docs/api.md lists exactly the table's rows,
// in its order.
func TestErrorTableMatchesDocs(t *testing.T) {
	t.Parallel()
	docs := docErrorRows(t)
	var want []string
	for _, c := range errorCodes {
		want = append(want, docRow(c))
	}
	for _, w := range want {
		if !slices.Contains(docs, w) {
			t.Errorf("docs/api.md \"Errors\" lacks the row\n%s", w)
		}
	}
	for _, d := range docs {
		if !slices.Contains(want, d) {
			t.Errorf("docs/api.md \"Errors\" has a row the error table (gateway/errors.go) does not:\n%s", d)
		}
	}
	if !t.Failed() && !slices.Equal(docs, want) {
		t.Errorf("docs/api.md lists the codes in another order than errorCodes:\n%s", strings.Join(want, "\n"))
	}
}

// TestSDKExportsEveryCode: the Go SDK declares one Code* constant per row,
// with the row's code, and no other.
func TestSDKExportsEveryCode(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("../sdk/go/*.go")
	if err != nil || len(names) == 0 {
		t.Fatalf("no SDK sources: %v", err)
	}
	sdk := map[string]string{} // constant → value
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("sdk constant %s is not a string literal", n.Name)
						continue
					}
					sdk[n.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	values := map[string]bool{}
	for name, v := range sdk {
		values[v] = true
		if !slices.ContainsFunc(errorCodes, func(c *errorCode) bool { return c.Code == v }) {
			t.Errorf("the SDK's %s = %q is not in the error table", name, v)
		}
	}
	for _, c := range errorCodes {
		if !values[c.Code] {
			t.Errorf("the SDK exports no constant for code %q", c.Code)
		}
	}
	// The parsed package is the one this module builds against.
	if corvo.CodeNotFound != codeNotFound.Code || corvo.CodeShuttingDown != codeShuttingDown.Code {
		t.Error("the SDK the main module imports disagrees with its source")
	}
}
