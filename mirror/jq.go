package mirror

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// The payload_jq subset, compiled to SQL over the payload column with bound
// parameters (never string-built SQL):
//
//	expr   := or
//	or     := and ("or" and)*
//	and    := unary ("and" unary)*
//	unary  := "not" unary | pipe
//	pipe   := term ("|" func)*          func: contains(lit) startswith(lit) endswith(lit) length not
//	term   := path (cmp literal)? | "(" expr ")" (cmp literal)?
//	path   := "." | ("." name)+          name: letters, digits, _ (or "quoted")
//	cmp    := == != > >= < <=
//
// "length" yields a number that may be compared: .items | length > 5.

// JQError is a payload_jq expression outside the subset.
type JQError struct{ Msg string }

func (e *JQError) Error() string { return "payload_jq: " + e.Msg }

type jqTok struct {
	kind string // path, str, num, lit (true/false/null), op, ident, punct
	text string
	path []string
}

func jqLex(s string) ([]jqTok, error) {
	var toks []jqTok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '.':
			var path []string
			j := i
			for j < len(s) && s[j] == '.' {
				j++
				if j < len(s) && s[j] == '"' {
					k := j + 1
					for k < len(s) && s[k] != '"' {
						if s[k] == '\\' {
							k++
						}
						k++
					}
					if k >= len(s) {
						return nil, &JQError{"unterminated quoted key"}
					}
					key, err := strconv.Unquote(s[j : k+1])
					if err != nil {
						return nil, &JQError{"bad quoted key"}
					}
					path = append(path, key)
					j = k + 1
					continue
				}
				k := j
				for k < len(s) && (s[k] == '_' || unicode.IsLetter(rune(s[k])) || unicode.IsDigit(rune(s[k]))) {
					k++
				}
				if k == j {
					if len(path) == 0 && (k >= len(s) || s[k] != '.') {
						break // "." alone: the payload itself
					}
					return nil, &JQError{fmt.Sprintf("bad path at %q", s[i:])}
				}
				path = append(path, s[j:k])
				j = k
			}
			toks = append(toks, jqTok{kind: "path", path: path})
			i = j
		case c == '"':
			k := i + 1
			for k < len(s) && s[k] != '"' {
				if s[k] == '\\' {
					k++
				}
				k++
			}
			if k >= len(s) {
				return nil, &JQError{"unterminated string"}
			}
			v, err := strconv.Unquote(s[i : k+1])
			if err != nil {
				return nil, &JQError{"bad string literal"}
			}
			toks = append(toks, jqTok{kind: "str", text: v})
			i = k + 1
		case c == '-' || (c >= '0' && c <= '9'):
			k := i + 1
			for k < len(s) && (s[k] >= '0' && s[k] <= '9' || s[k] == '.' || s[k] == 'e' || s[k] == 'E' || s[k] == '+' || s[k] == '-') {
				k++
			}
			if _, err := strconv.ParseFloat(s[i:k], 64); err != nil {
				return nil, &JQError{fmt.Sprintf("bad number %q", s[i:k])}
			}
			toks = append(toks, jqTok{kind: "num", text: s[i:k]})
			i = k
		case strings.ContainsRune("=!<>", rune(c)):
			op := string(c)
			if i+1 < len(s) && s[i+1] == '=' {
				op += "="
			}
			if op == "=" || op == "!" {
				return nil, &JQError{fmt.Sprintf("unknown operator %q (use == or !=)", op)}
			}
			toks = append(toks, jqTok{kind: "op", text: op})
			i += len(op)
		case c == '|' || c == '(' || c == ')':
			toks = append(toks, jqTok{kind: "punct", text: string(c)})
			i++
		case unicode.IsLetter(rune(c)):
			k := i
			for k < len(s) && (unicode.IsLetter(rune(s[k])) || s[k] == '_') {
				k++
			}
			w := s[i:k]
			if w == "true" || w == "false" || w == "null" {
				toks = append(toks, jqTok{kind: "lit", text: w})
			} else {
				toks = append(toks, jqTok{kind: "ident", text: w})
			}
			i = k
		default:
			return nil, &JQError{fmt.Sprintf("unexpected %q", string(c))}
		}
	}
	return toks, nil
}

type jqParser struct {
	toks []jqTok
	pos  int
	ps   *Params
}

// Params numbers a query's bound parameters (?1, ?2, …) so that a value can
// be referenced more than once.
type Params struct{ Args []any }

// Add binds v and returns its placeholder.
func (ps *Params) Add(v any) string {
	ps.Args = append(ps.Args, v)
	return "?" + strconv.Itoa(len(ps.Args))
}

// CompileJQ turns an expression into a SQL condition on column col, binding
// its values in ps.
func CompileJQ(expr, col string, ps *Params) (string, error) {
	if len(expr) > 4096 {
		return "", &JQError{"expression too long"}
	}
	toks, err := jqLex(expr)
	if err != nil {
		return "", err
	}
	if len(toks) == 0 {
		return "", &JQError{"empty expression"}
	}
	p := &jqParser{toks: toks, ps: ps}
	sqlText, err := p.or(col, 0)
	if err != nil {
		return "", err
	}
	if p.pos != len(p.toks) {
		return "", &JQError{fmt.Sprintf("unexpected %q", p.toks[p.pos].text)}
	}
	return sqlText, nil
}

func (p *jqParser) peek() *jqTok {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

func (p *jqParser) is(kind, text string) bool {
	t := p.peek()
	return t != nil && t.kind == kind && t.text == text
}

const maxDepth = 32

func (p *jqParser) or(col string, depth int) (string, error) {
	if depth > maxDepth {
		return "", &JQError{"expression nested too deeply"}
	}
	left, err := p.and(col, depth)
	if err != nil {
		return "", err
	}
	for p.is("ident", "or") {
		p.pos++
		right, err := p.and(col, depth)
		if err != nil {
			return "", err
		}
		left = "(" + left + " OR " + right + ")"
	}
	return left, nil
}

func (p *jqParser) and(col string, depth int) (string, error) {
	left, err := p.unary(col, depth)
	if err != nil {
		return "", err
	}
	for p.is("ident", "and") {
		p.pos++
		right, err := p.unary(col, depth)
		if err != nil {
			return "", err
		}
		left = "(" + left + " AND " + right + ")"
	}
	return left, nil
}

func (p *jqParser) unary(col string, depth int) (string, error) {
	if p.is("ident", "not") {
		p.pos++
		inner, err := p.unary(col, depth+1)
		if err != nil {
			return "", err
		}
		return "NOT COALESCE(" + inner + ", 0)", nil
	}
	return p.pipe(col, depth)
}

// jqValue is what a term evaluates to before a comparison.
type jqValue struct {
	sql    string // SQL expression of the value
	isBool bool   // already a condition
	col    string // for a path: the column …
	path   string // … and the placeholder of its JSON path
}

// typ is the SQL expression of a path value's JSON type.
func (v jqValue) typ() string { return "json_type(" + v.col + ", " + v.path + ")" }

func (p *jqParser) pipe(col string, depth int) (string, error) {
	var v jqValue
	switch t := p.peek(); {
	case t == nil:
		return "", &JQError{"unexpected end"}
	case t.kind == "punct" && t.text == "(":
		p.pos++
		inner, err := p.or(col, depth+1)
		if err != nil {
			return "", err
		}
		if !p.is("punct", ")") {
			return "", &JQError{"missing )"}
		}
		p.pos++
		v = jqValue{sql: "(" + inner + ")", isBool: true}
	case t.kind == "path":
		p.pos++
		ph := p.ps.Add(jsonPath(t.path))
		v = jqValue{sql: "json_extract(" + col + ", " + ph + ")", col: col, path: ph}
	default:
		return "", &JQError{fmt.Sprintf("expected a path like .field, got %q", t.text)}
	}
	for p.is("punct", "|") {
		p.pos++
		t := p.peek()
		if t == nil || t.kind != "ident" {
			return "", &JQError{"expected a function after |"}
		}
		p.pos++
		switch t.text {
		case "not":
			v = jqValue{sql: "NOT COALESCE(" + cond(v) + ", 0)", isBool: true}
		case "length":
			if v.path == "" {
				return "", &JQError{"length needs a path"}
			}
			v = jqValue{sql: "(CASE " + v.typ() + " WHEN 'array' THEN json_array_length(" + v.col + ", " + v.path + ") WHEN 'object' THEN (SELECT count(*) FROM json_each(" + v.col + ", " + v.path + ")) WHEN 'text' THEN length(" + v.sql + ") END)"}
		case "contains", "startswith", "endswith":
			arg, err := p.callArg()
			if err != nil {
				return "", err
			}
			if v.path == "" {
				return "", &JQError{t.text + " needs a path"}
			}
			switch t.text {
			case "contains":
				a := p.ps.Add(arg)
				v = jqValue{sql: "(CASE " + v.typ() + " WHEN 'array' THEN EXISTS (SELECT 1 FROM json_each(" + v.col + ", " + v.path + ") WHERE value = " + a + ") WHEN 'text' THEN instr(" + v.sql + ", " + a + ") > 0 ELSE 0 END)", isBool: true}
			case "startswith":
				a := p.ps.Add(likeEscape(fmt.Sprint(arg)) + "%")
				v = jqValue{sql: "(" + v.typ() + " = 'text' AND " + v.sql + " LIKE " + a + " ESCAPE '\\')", isBool: true}
			case "endswith":
				a := p.ps.Add("%" + likeEscape(fmt.Sprint(arg)))
				v = jqValue{sql: "(" + v.typ() + " = 'text' AND " + v.sql + " LIKE " + a + " ESCAPE '\\')", isBool: true}
			}
		default:
			return "", &JQError{fmt.Sprintf("function %q is not in the supported subset (contains, startswith, endswith, length, not)", t.text)}
		}
	}
	if t := p.peek(); t != nil && t.kind == "op" {
		p.pos++
		lit := p.peek()
		if lit == nil || (lit.kind != "str" && lit.kind != "num" && lit.kind != "lit") {
			return "", &JQError{"a comparison needs a literal (string, number, true, false or null)"}
		}
		p.pos++
		if v.isBool {
			return "", &JQError{"cannot compare a condition"}
		}
		return p.compare(v, t.text, lit)
	}
	return cond(v), nil
}

func (p *jqParser) callArg() (any, error) {
	if !p.is("punct", "(") {
		return nil, &JQError{"expected ( after the function name"}
	}
	p.pos++
	t := p.peek()
	if t == nil || (t.kind != "str" && t.kind != "num") {
		return nil, &JQError{"the function takes one string or number"}
	}
	p.pos++
	if !p.is("punct", ")") {
		return nil, &JQError{"missing )"}
	}
	p.pos++
	if t.kind == "num" {
		f, _ := strconv.ParseFloat(t.text, 64)
		return f, nil
	}
	return t.text, nil
}

func (p *jqParser) compare(v jqValue, op string, lit *jqTok) (string, error) {
	sqlOp := map[string]string{"==": "=", "!=": "<>", ">": ">", ">=": ">=", "<": "<", "<=": "<="}[op]
	typeIs := func(types string) string {
		if v.path == "" {
			return "1"
		}
		return v.typ() + " IN (" + types + ")"
	}
	switch lit.kind {
	case "str":
		return "(" + v.sql + " " + sqlOp + " " + p.ps.Add(lit.text) + " AND " + typeIs("'text'") + ")", nil
	case "num":
		f, _ := strconv.ParseFloat(lit.text, 64)
		return "(" + v.sql + " " + sqlOp + " " + p.ps.Add(f) + " AND " + typeIs("'integer','real'") + ")", nil
	}
	switch lit.text {
	case "null":
		if v.path == "" {
			break
		}
		if op == "==" {
			return "(" + v.typ() + " = 'null')", nil
		}
		if op == "!=" {
			return "(" + v.typ() + " IS NOT 'null')", nil
		}
	case "true", "false":
		b := 0
		if lit.text == "true" {
			b = 1
		}
		if op == "==" || op == "!=" {
			return "(" + v.sql + " " + sqlOp + " " + p.ps.Add(b) + " AND " + typeIs("'true','false'") + ")", nil
		}
	}
	return "", &JQError{fmt.Sprintf("%s cannot be compared with %s", lit.text, op)}
}

func cond(v jqValue) string {
	if v.isBool {
		return v.sql
	}
	if v.path == "" {
		return "(" + v.sql + " IS NOT NULL AND " + v.sql + " <> 0)"
	}
	// A bare path is true when it exists and is neither null nor false.
	return "COALESCE(" + v.typ() + " NOT IN ('null','false'), 0)"
}

// jsonPath is a SQLite JSON path; keys are quoted, so no key can break out.
func jsonPath(path []string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, k := range path {
		b.WriteString(".")
		b.WriteString(strconv.Quote(k))
	}
	return b.String()
}

func likeEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}
