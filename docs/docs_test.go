// Package docs holds the user documentation (README.md and docs/*.md) and
// the tests that keep it honest: every relative link resolves to a file and
// a heading that exist, the quick start shows the migrations a new user
// gets, and the pages stay within their sizes, free of dated run history.
//
// The YAML examples are checked elsewhere, with the code of `queuebox config
// check` (bootstrap/docs_test.go).
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// page is one Markdown file of the docs, as lines, with those inside fenced
// code blocks marked.
type page struct {
	path  string // relative to the repository's root, as links name it
	lines []string
	code  []bool // code[i]: lines[i] is inside a fenced block (or its fence)
}

// pages reads README.md and docs/*.md.
func pages(t *testing.T) []page {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"README.md"}
	for _, f := range files {
		paths = append(paths, "docs/"+f)
	}
	var ps []page
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		pg := page{path: p, lines: strings.Split(string(b), "\n")}
		fence := ""
		for _, l := range pg.lines {
			trimmed := strings.TrimLeft(l, " ")
			switch {
			case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
				fence = trimmed[:3]
				pg.code = append(pg.code, true)
			case fence != "" && strings.HasPrefix(trimmed, fence):
				fence = ""
				pg.code = append(pg.code, true)
			default:
				pg.code = append(pg.code, fence != "")
			}
		}
		ps = append(ps, pg)
	}
	if len(ps) < 5 {
		t.Fatalf("found only %d pages; the test runs in the docs folder", len(ps))
	}
	return ps
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	linkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// anchor is the id GitHub gives a heading: the text as rendered (code spans
// and links reduced to their text), in lower case, without the characters
// that are neither letters, digits, marks, connectors (_), hyphens nor
// spaces, and with each space a hyphen.
func anchor(heading string) string {
	text := codeSpanRE.ReplaceAllStringFunc(heading, func(s string) string { return strings.Trim(s, "`") })
	text = linkTextRE.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("**", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists a page's heading ids, a repeated one with -1, -2, ... as
// GitHub numbers them.
func (p page) anchors() map[string]bool {
	ids, seen := map[string]bool{}, map[string]int{}
	for i, l := range p.lines {
		m := headingRE.FindStringSubmatch(l)
		if m == nil || p.code[i] {
			continue
		}
		id := anchor(m[2])
		if n, ok := seen[id]; ok {
			seen[id] = n + 1
			id = fmt.Sprintf("%s-%d", id, n+1)
		} else {
			seen[id] = 0
		}
		ids[id] = true
	}
	return ids
}

// Every relative link of README.md and docs/*.md leads to a file that
// exists, and, for a link with a #fragment into a page, to a heading that
// page has.
func TestLinksLeadToFilesAndHeadingsThatExist(t *testing.T) {
	ps := pages(t)
	byPath := map[string]page{}
	for _, p := range ps {
		byPath[p.path] = p
	}
	checked := 0
	for _, p := range ps {
		for i, l := range p.lines {
			if p.code[i] {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if schemeRE.MatchString(target) {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d: the link %s", p.path, i+1, target)
				dest := p.path
				if file != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.path), file)))
					if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(dest))); err != nil {
						t.Errorf("%s: %s does not exist", where, dest)
						continue
					}
				}
				if frag == "" {
					continue
				}
				to, ok := byPath[dest]
				if !ok {
					t.Errorf("%s: a #fragment into %s, which is not a page of the docs", where, dest)
					continue
				}
				if !to.anchors()[frag] {
					t.Errorf("%s: %s has no heading whose id is %q", where, dest, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d relative links found: the link pattern no longer matches the docs", checked)
	}
}

// The anchor function follows GitHub's rules on the kinds of heading the
// docs have.
func TestAnchorFollowsGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"Wake-ups from the database: `database.wakeups`":             "wake-ups-from-the-database-databasewakeups",
		"The attempt history: `outbox.history`":                      "the-attempt-history-outboxhistory",
		"`GET /api/rows/{id}`":                                       "get-apirowsid",
		"What your application pays, and ordering between producers": "what-your-application-pays-and-ordering-between-producers",
		"The local default: `queuebox dev`":                          "the-local-default-queuebox-dev",
		"Long transactions: claims bounded by what the relay knows":  "long-transactions-claims-bounded-by-what-the-relay-knows",
		"Running `queuebox bench`":                                   "running-queuebox-bench",
		"max_in_flight and [links](x.md)":                            "max_in_flight-and-links",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

var appliedRE = regexp.MustCompile(`msg="migrations applied" count=(\d+) version=(\d+)`)

// The quick start shows the `migrations applied` line that a new user's
// `make run` logs: as many migrations as the PostgreSQL dialect bundles, up
// to the newest.
func TestQuickStartNamesTheNewestMigration(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "migrations", "postgresql", "V*__*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	newest := 0
	for _, f := range files {
		v, err := strconv.Atoi(strings.TrimPrefix(strings.SplitN(filepath.Base(f), "__", 2)[0], "V"))
		if err != nil {
			t.Fatalf("%s: a migration whose name does not start with V<number>__: %v", f, err)
		}
		newest = max(newest, v)
	}
	if len(files) == 0 {
		t.Fatal("no PostgreSQL migration found in ../migrations/postgresql")
	}
	b, err := os.ReadFile("quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	ms := appliedRE.FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Fatal(`docs/quickstart.md shows no msg="migrations applied" count=N version=N line`)
	}
	for _, m := range ms {
		if m[1] != strconv.Itoa(len(files)) || m[2] != strconv.Itoa(newest) {
			t.Errorf("docs/quickstart.md shows %q; a new user sees count=%d version=%d (migrations/postgresql)", m[0], len(files), newest)
		}
	}
}

// The size limits of the pages that grew into lab notebooks once: a page
// over its limit is to be cut back, not the limit raised.
func TestPagesStayWithinTheirSizes(t *testing.T) {
	limits := map[string]int{
		"README.md":           110,
		"docs/performance.md": 600,
		"docs/decisions.md":   700,
		"docs/operations.md":  1000,
	}
	for _, p := range pages(t) {
		n := len(p.lines)
		if n > 0 && p.lines[n-1] == "" {
			n-- // the newline that ends the file
		}
		if limit, ok := limits[p.path]; ok && n > limit {
			t.Errorf("%s has %d lines, over its limit of %d", p.path, n, limit)
		}
		if p.path != "README.md" {
			continue
		}
		for i, l := range p.lines {
			if c := len([]rune(l)); c > 400 {
				t.Errorf("README.md:%d is %d characters long, over 400: the front page is a summary", i+1, c)
			}
		}
	}
}

var nightRE = regexp.MustCompile(`(?i)night`)

// The docs describe the product as it is: no page tells the story of the
// nights it was measured on.
func TestNoNights(t *testing.T) {
	for _, p := range pages(t) {
		for i, l := range p.lines {
			if nightRE.MatchString(l) {
				t.Errorf("%s:%d: %q", p.path, i+1, strings.TrimSpace(l))
			}
		}
	}
}

// A date in the docs says when something was measured; a timestamp in an
// example of output (2025-03-01T12:00:00Z) is data and does not count.
var dateRE = regexp.MustCompile(`\b(?:20\d\d-[01]\d-[0-3]\d(?:[^T\d]|$)|(?:January|February|March|April|June|July|August|September|October|November|December) [0-3]?\d\b)`)

// The README has no dates; no other page has more than three dated lines
// (when its reference figures were measured).
func TestFewDatedLines(t *testing.T) {
	for _, p := range pages(t) {
		var dated []string
		for i, l := range p.lines {
			if dateRE.MatchString(l) {
				dated = append(dated, fmt.Sprintf("%d: %s", i+1, strings.TrimSpace(l)))
			}
		}
		limit := 3
		if p.path == "README.md" {
			limit = 0
		}
		if len(dated) > limit {
			t.Errorf("%s has %d dated lines, at most %d:\n%s", p.path, len(dated), limit, strings.Join(dated[:min(len(dated), 10)], "\n"))
		}
	}
}

// pages reads every page the other tests check.
func TestPagesAreAllRead(t *testing.T) {
	var got []string
	for _, p := range pages(t) {
		got = append(got, p.path)
	}
	for _, want := range []string{"README.md", "docs/operations.md", "docs/performance.md", "docs/decisions.md", "docs/quickstart.md", "docs/how-it-works.md"} {
		if !slices.Contains(got, want) {
			t.Errorf("the pages read are %v, without %s", got, want)
		}
	}
}
