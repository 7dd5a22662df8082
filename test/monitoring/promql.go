package monitoring

import (
	"regexp"
	"slices"
	"strings"
)

// MetricNames returns the metric names a PromQL expression (or a Grafana query, with its $variables and
// label_values(metric, label) form) selects. It is a small lexer, not a parser: it drops strings, label
// matchers and ranges, then keeps the identifiers that are neither functions, aggregations, keywords nor
// the label lists of by/without/on/ignoring/group_left/group_right. Enough for the expressions of our own
// rules and dashboard, which its tests cover.
func MetricNames(expr string) []string {
	s := stripStrings(expr)
	s = labelValues.ReplaceAllString(s, "$1")
	s = stripBetween(s, '{', '}')
	s = stripBetween(s, '[', ']')
	s = grafanaVar.ReplaceAllString(s, " ")
	toks := token.FindAllString(s, -1)
	var names []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case !ident.MatchString(t):
			continue
		case slices.Contains(groupings, t):
			i = skipGroup(toks, i+1)
		case slices.Contains(keywords, t), slices.Contains(aggregations, t):
			continue
		case i+1 < len(toks) && toks[i+1] == "(":
			continue // a function
		default:
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
	}
	return names
}

var (
	token       = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*|[()]|[^\sa-zA-Z0-9_:()]+`)
	ident       = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	grafanaVar  = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_:]*\}?`)
	labelValues = regexp.MustCompile(`label_values\(\s*([^,()]*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)

	groupings    = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords     = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN", "atan2"}
	aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)

// skipGroup returns the index of the ")" closing the parenthesized list starting at toks[i], or i-1 when
// toks[i] is not "(" (group_left without labels).
func skipGroup(toks []string, i int) int {
	if i >= len(toks) || toks[i] != "(" {
		return i - 1
	}
	for j := i; j < len(toks); j++ {
		if toks[j] == ")" {
			return j
		}
	}
	return len(toks)
}

// stripStrings replaces string literals with a blank.
func stripStrings(s string) string {
	var b strings.Builder
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case quote == 0 && (r == '"' || r == '\'' || r == '`'):
			quote = r
			b.WriteRune(' ')
		case quote == 0:
			b.WriteRune(r)
		case escaped:
			escaped = false
		case r == '\\' && quote != '`':
			escaped = true
		case r == quote:
			quote = 0
		}
	}
	return b.String()
}

// stripBetween replaces what lies between open and close (inclusive) with a blank.
func stripBetween(s string, open, close rune) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == open:
			if depth == 0 {
				b.WriteRune(' ')
			}
			depth++
		case r == close && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
