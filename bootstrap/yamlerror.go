package bootstrap

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A file that is not YAML at all is reported as one problem of the key
// "(file)": the line where it stops being YAML, the column where the fault
// shows, and what most likely causes it, in words, with the parser's own
// phrase in parentheses for whoever knows YAML's terms.
//
// The parser's "line N" is where the enclosing value starts (the mapping
// whose key is misplaced, the list whose item is misindented, the quote
// that is never closed ...), often lines before the fault. The line
// reported is instead the first line at which the start of the file fails
// the same way: cutting a YAML file after a whole line leaves valid YAML,
// except where the fault already is.

// yamlProblem turns the YAML parser's error on data into a problem.
func yamlProblem(err error, data []byte) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	cause := withoutLine(msg)
	lines := strings.SplitAfter(string(data), "\n")
	if p, ok := tabProblem(err, cause, lines); ok {
		return p
	}
	failsLikeFile := func(text string) bool {
		var n yaml.Node
		e := yaml.Unmarshal([]byte(text), &n)
		return e != nil && withoutLine(strings.TrimPrefix(e.Error(), "yaml: ")) == cause
	}
	k := sort.Search(len(lines), func(i int) bool { return failsLikeFile(strings.Join(lines[:i+1], "")) })
	if k == len(lines) {
		// No start of the file fails alone: the parser's line is all
		// there is.
		line := parserLine(msg)
		return Problem{Key: "(file)", Line: line, Reason: yamlReason(cause, line)}
	}
	text := strings.TrimRight(lines[k], "\r\n")
	col, reason := yamlColumn(cause, text, k+1)
	return Problem{Key: "(file)", Line: k + 1, Column: col, Reason: reason}
}

// yamlColumn finds where on line n (its text) the fault shows, and words
// the problem.
func yamlColumn(cause, text string, n int) (int, string) {
	first := len(text) - len(strings.TrimLeft(text, " \t")) // the first character that is not indentation
	col := first + 1
	switch {
	case strings.Contains(cause, "cannot start any token"):
		if i := strings.IndexAny(text[first:], "@`%\t"); i >= 0 {
			col = first + i + 1
			return col, fmt.Sprintf("%q cannot start a value in YAML; put the value in quotes (%s)", text[first+i:first+i+1], cause)
		}
	case strings.Contains(cause, "mapping values are not allowed"):
		// "url: a: b": a second ": " on the line is the common cause;
		// otherwise a key indented deeper than the keys above it.
		if _, value, ok := strings.Cut(text[first:], ": "); ok {
			if i := strings.Index(value, ": "); i >= 0 && !strings.ContainsAny(value[:1], `"'`) {
				col = len(text) - len(value) + i + 1
				return col, fmt.Sprintf("the value holds \": \", which YAML reads as the start of another key; put the value in quotes (%s)", cause)
			}
		}
	case strings.Contains(cause, "did not find expected ',' or '}'"):
		if i := strings.LastIndex(text, "{"); i >= 0 {
			col = i + 1
		}
	case strings.Contains(cause, "did not find expected ',' or ']'"):
		if i := strings.LastIndex(text, "["); i >= 0 {
			col = i + 1
		}
	case strings.Contains(cause, "found unexpected end of stream"):
		if i := strings.IndexAny(text, `"'`); i >= 0 {
			col = i + 1
		}
	}
	return col, yamlReason(cause, n)
}

// yamlReason words the parser's problem found on line n (0 when not
// known), ending with what to check.
func yamlReason(cause string, n int) string {
	where := "the indentation"
	if n > 0 {
		where = fmt.Sprintf("the indentation on line %d", n)
	}
	var what string
	switch {
	case strings.Contains(cause, "mapping values are not allowed"):
		what = fmt.Sprintf("this key is indented deeper than the keys above it; check %s: the keys of one mapping start in the same column", where)
	case strings.Contains(cause, "did not find expected key"):
		what = fmt.Sprintf("this line does not line up with the keys or list items around it; check %s", where)
	case strings.Contains(cause, "did not find expected '-' indicator"):
		what = fmt.Sprintf("a key stands among the items of a list; check %s: every item starts with \"- \" in the same column", where)
	case strings.Contains(cause, "could not find expected ':'"):
		what = fmt.Sprintf("this line is neither \"key: value\" nor a list item; add \": \" after the key, or check %s", where)
	case strings.Contains(cause, "did not find expected ',' or '}'"), strings.Contains(cause, "did not find expected ',' or ']'"):
		open := "{"
		if strings.Contains(cause, "']'") {
			open = "["
		}
		what = fmt.Sprintf("the %s here is not closed where YAML expects it: close it, and separate its entries with commas", open)
	case strings.Contains(cause, "found unexpected end of stream"):
		what = "a quoted value that starts here has no closing quote; add it"
	case strings.Contains(cause, "block sequence entries are not allowed"):
		what = fmt.Sprintf("a list item (\"- \") stands where a value or key belongs; put it on a line of its own, or check %s", where)
	default:
		what = "the file is not valid YAML here; check " + where
	}
	return what + " (" + cause + ")"
}

// tabProblem blames a tab in the indentation, the most common cause of a
// file that looks right: only when the parser complained of a tab (or of a
// character that cannot start a token) and the tab caused it. The line is
// the shortest start of the file that fails with the very same error, and
// replacing that line's tabs by spaces must make the error go away.
func tabProblem(err error, cause string, lines []string) (Problem, bool) {
	if !oneOf(cause, "found character that cannot start any token",
		"found a tab character that violates indentation",
		"found a tab character where an indentation space is expected") {
		return Problem{}, false
	}
	same := func(text string) bool {
		var n yaml.Node
		e := yaml.Unmarshal([]byte(text), &n)
		return e != nil && e.Error() == err.Error()
	}
	k := sort.Search(len(lines), func(i int) bool { return same(strings.Join(lines[:i+1], "")) })
	if k == len(lines) {
		return Problem{}, false
	}
	line := lines[k]
	indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	fixed := strings.ReplaceAll(indent, "\t", "  ") + line[len(indent):]
	if !strings.Contains(indent, "\t") || same(strings.Join(lines[:k], "")+fixed) {
		return Problem{}, false
	}
	return Problem{Key: "(file)", Line: k + 1, Column: strings.Index(indent, "\t") + 1,
		Reason: fmt.Sprintf("line %d is indented with a tab; YAML indents with spaces only: replace the tab with spaces (%s)", k+1, cause)}, true
}

// withoutLine drops the parser's "line N: " from its message.
func withoutLine(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			return rest[i+2:]
		}
	}
	return msg
}

// parserLine is the N of the parser's "line N: ", or 0.
func parserLine(msg string) int {
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			n, _ := strconv.Atoi(rest[:i])
			return n
		}
	}
	return 0
}
