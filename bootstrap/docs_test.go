package bootstrap

// Every YAML example in README.md and docs/*.md is loaded and checked here
// with the code of `queuebox config check`: Parse, then the printed
// configuration (Effective) is loaded back. The examples are read from the
// Markdown when the test runs, so a doc that changes is tested as it is.
//
// The convention, for whoever writes docs:
//
//   - A ```yaml block is a complete configuration file: it must load as it
//     is.
//   - A block whose first line is "# fragment" is part of a file: it is
//     merged into fragmentBase below (mappings merge key by key; anything
//     else, such as the routes list, replaces the base's value) and the
//     result must load. A fragment that routes to a destination defines it.
//   - ${NAME} without a default is given a value: docEnv's, or a plain
//     placeholder. ${NAME:-default} is left unset, so the default is used.
//   - A block whose first line is "# Helm values" is a values file of the
//     Helm chart, not a configuration file: it is not read here; the
//     chart's tests (deploy/helm) render it.
//
// Blocks in other languages (sh, text, sql) are not read.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const fragmentBase = `
database:
  url: postgres://queuebox@localhost:5432/app?sslmode=disable
destinations:
  base-discard: { type: "null" }
routes:
  - { topicPattern: "#", destination: base-discard }
`

// docEnv holds values for variables whose placeholder would not validate.
var docEnv = map[string]string{
	"WEBHOOK_SECRET":     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"WEBHOOK_SECRET_NEW": "whsec_QkVTdC1rZXktb2YtdGhlLXJvdGF0aW9uIQ==",
}

type docBlock struct {
	where    string // file:line
	text     string
	fragment bool
}

var fenceRE = regexp.MustCompile("(?m)^```yaml[ \t]*\n((?s:.*?))^```[ \t]*$")

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var out []docBlock
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range fenceRE.FindAllStringSubmatchIndex(text, -1) {
			body := text[m[2]:m[3]]
			first, _, _ := strings.Cut(body, "\n")
			if strings.TrimSpace(first) == "# Helm values" {
				continue
			}
			out = append(out, docBlock{
				where:    fmt.Sprintf("%s:%d", strings.TrimPrefix(f, "../"), strings.Count(text[:m[0]], "\n")+1),
				text:     body,
				fragment: strings.TrimSpace(first) == "# fragment",
			})
		}
	}
	return out
}

// docLookup is the environment of an example.
func docLookup(block string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if v, ok := docEnv[name]; ok {
			return v, true
		}
		if strings.Contains(block, "${"+name+"}") {
			return "example-" + strings.ToLower(name), true
		}
		return "", false
	}
}

// merge lays fragment over base: mappings merge key by key, anything else
// replaces.
func merge(base, fragment map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range fragment {
		bm, bok := out[k].(map[string]any)
		fm, fok := v.(map[string]any)
		if bok && fok {
			out[k] = merge(bm, fm)
		} else {
			out[k] = v
		}
	}
	return out
}

func TestDocumentedConfigurationsLoad(t *testing.T) {
	blocks := docBlocks(t)
	complete, fragments := 0, 0
	for _, b := range blocks {
		t.Run(b.where, func(t *testing.T) {
			data := []byte(b.text)
			if b.fragment {
				fragments++
				var base, frag map[string]any
				if err := yaml.Unmarshal([]byte(fragmentBase), &base); err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(data, &frag); err != nil {
					t.Fatalf("%s: the fragment is not YAML: %v", b.where, err)
				}
				merged, err := yaml.Marshal(merge(base, frag))
				if err != nil {
					t.Fatal(err)
				}
				data = merged
			} else {
				complete++
			}
			env := docLookup(b.text)
			l, err := Parse(b.where, data, env)
			if err != nil {
				kind := "complete file"
				if b.fragment {
					kind = "fragment (merged into the test's base)"
				} else {
					err = fmt.Errorf("%w\n(if it is part of a file, make its first line \"# fragment\")", err)
				}
				t.Fatalf("the example at %s, a %s, does not load:\n%v\n%s", b.where, kind, err, data)
			}
			out, err := l.Effective()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(b.where+" (printed)", out, env); err != nil {
				t.Fatalf("config check's output for %s does not load back: %v\n%s", b.where, err, out)
			}
		})
	}
	// The extraction itself must find the examples the docs hold today.
	if complete < 2 || fragments < 3 {
		t.Fatalf("found %d complete examples and %d fragments; the extraction is broken", complete, fragments)
	}
}
