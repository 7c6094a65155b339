package bootstrap

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/sinks/tracing"
)

// Problem is one fault of a configuration: the key path, its line in the
// file (0 when unknown), its column where one is known (a YAML syntax
// error) and the reason.
type Problem struct {
	Key    string
	Line   int
	Column int
	Reason string
}

func (p Problem) String() string {
	switch {
	case p.Line > 0 && p.Column > 0:
		return fmt.Sprintf("%s (line %d, column %d): %s", p.Key, p.Line, p.Column, p.Reason)
	case p.Line > 0:
		return fmt.Sprintf("%s (line %d): %s", p.Key, p.Line, p.Reason)
	}
	return fmt.Sprintf("%s: %s", p.Key, p.Reason)
}

// Error is an invalid configuration: every problem found, one per line.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	n := len(e.Problems)
	fmt.Fprintf(&b, "the configuration %s has %d problem", e.File, n)
	if n != 1 {
		b.WriteString("s")
	}
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Loaded is a loaded, validated configuration with its secrets and what
// validation compiled from it.
type Loaded struct {
	*Config
	File     string
	Secrets  *Secrets
	Compiled *Compiled
	// Warnings are keys that load but do nothing any more, with what to do.
	Warnings []Problem
	// Unset are the variables ${NAME} outside database.* that were not set
	// when the file was loaded for a tool (LoadForTools): the keys that use
	// them are empty. Load refuses such a file instead.
	Unset []Problem
	// raw is the text as written of each value that used ${NAME}, by key
	// path: Effective prints it instead of a secret.
	raw map[string]string
	// fromEnv names the variable that replaced a key whole
	// (QUEUEBOX_DATABASE_URL), by key path: Effective prints its ${NAME}.
	fromEnv map[string]string
	// OutboxName is the outbox this view is of (Loaded.ForOutbox); "" for
	// the file as a whole.
	OutboxName string
	// present marks the keys the file gives (the pools' shares).
	present map[string]bool
	// Tracer makes the spans of deliveries and inbox receipts; nil is
	// tracing off. Run sets it from the OTEL_* environment (telemetry.go).
	Tracer *tracing.Tracer
}

// Load reads, substitutes, decodes and validates a configuration file, as
// `queuebox run` and `queuebox config check` need it: every variable it
// uses must be set.
func Load(path string) (*Loaded, error) { return load(path, Parse) }

// LoadForTools is Load for the commands that only read and replay rows
// (status, dead, replay, migrate): they need the database settings, not
// the secrets of the destinations and inbox sources, which an operator's
// shell often does not hold. A variable ${NAME} that is not set outside
// database.* leaves its key empty (Loaded.Unset lists them) instead of
// failing the load; every other problem still does.
func LoadForTools(path string) (*Loaded, error) { return load(path, ParseForTools) }

func load(path string, parse func(string, []byte, func(string) (string, bool)) (*Loaded, error)) (*Loaded, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &Error{File: path, Problems: []Problem{{Key: "--config", Reason: fmt.Sprintf("the file %s does not exist; pass --config FILE, or create queuebox.yaml (docs/configuration.md shows one)", path)}}}
		}
		if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
			return nil, &Error{File: path, Problems: []Problem{{Key: "--config", Reason: folderReason(path)}}}
		}
		return nil, err
	}
	return parse(path, data, os.LookupEnv)
}

// folderReason says that --config names a folder, and which file to pass
// instead: the folder's queuebox.yaml when it holds one.
func folderReason(dir string) string {
	if fi, err := os.Stat(filepath.Join(dir, "queuebox.yaml")); err == nil && fi.Mode().IsRegular() {
		return fmt.Sprintf("%s is a folder, not a file; pass --config %s, the configuration file itself", dir, filepath.Join(dir, "queuebox.yaml"))
	}
	return fmt.Sprintf("%s is a folder, not a file; pass --config FILE, the configuration file itself (docs/configuration.md shows one)", dir)
}

// Parse is Load on bytes, with env as the environment.
func Parse(name string, data []byte, env func(string) (string, bool)) (*Loaded, error) {
	return parse(name, data, env, false)
}

// ParseForTools is LoadForTools on bytes, with env as the environment.
func ParseForTools(name string, data []byte, env func(string) (string, bool)) (*Loaded, error) {
	return parse(name, data, env, true)
}

func parse(name string, data []byte, env func(string) (string, bool), forTools bool) (*Loaded, error) {
	cfg := Defaults()
	secrets := NewSecrets()
	d := newDecoder(env, secrets)
	d.forTools = forTools
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &Error{File: name, Problems: []Problem{yamlProblem(err, data)}}
	}
	// QUEUEBOX_DATABASE_URL replaces database.url whole: the file's value
	// is not read, so a variable it uses need not be set. Problems with the
	// value name the variable, not the file's line; config check prints
	// the variable's ${NAME}, as it would a value written so in the file.
	override, overridden := env("QUEUEBOX_DATABASE_URL")
	overridden = overridden && override != ""
	if overridden {
		d.skip["database.url"] = true
		d.fromEnv["database.url"] = "QUEUEBOX_DATABASE_URL"
		d.secrets.AddFromEnv(override)
	}
	// An outbox of outboxes reads its outbox block over the top level's,
	// and its database block over the defaults: outboxes is decoded last,
	// whatever its place in the file, so that the top level is known.
	d.fresh = func(t reflect.Type) (reflect.Value, bool) {
		switch t {
		case reflect.TypeFor[OutboxEntryConfig]():
			return reflect.ValueOf(&OutboxEntryConfig{Database: Defaults().Database}), true
		case reflect.TypeFor[OutboxConfig]():
			o := cfg.Outbox
			return reflect.ValueOf(&o), true
		}
		return reflect.Value{}, false
	}
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		d.decode(outboxesLast(root.Content[0]), reflect.ValueOf(cfg).Elem(), "")
	}
	var warnings []Problem
	if _, many := d.lines["outboxes"]; many && overridden && !usesVariable(d.raw, "QUEUEBOX_DATABASE_URL") {
		// Each outbox has a URL of its own: the variable names none of them.
		warnings = append(warnings, Problem{Key: "QUEUEBOX_DATABASE_URL",
			Reason: "is set, but the file has outboxes, each with a database.url of its own, so it is not used; unset it, or write ${QUEUEBOX_DATABASE_URL} as one outbox's url"})
	}
	if _, many := d.lines["outboxes"]; many && overridden {
		overridden = false
		delete(d.fromEnv, "database.url")
	}
	if overridden {
		cfg.Database.URL = override
		d.present["database.url"] = true
	}
	cfg.applyDestinationDefaults()
	vp, compiled := validate(cfg, d)
	problems := append(d.problems, vp...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool {
			li, lj := problems[i].Line, problems[j].Line
			if li == 0 || lj == 0 {
				return lj == 0 && li != 0
			}
			return li < lj
		})
		return nil, &Error{File: name, Problems: problems}
	}
	collectSecrets(cfg, secrets)
	if cfg.Outbox.Notify != nil {
		warnings = append(warnings, Problem{Key: "outbox.notify", Line: d.lines["outbox.notify"],
			Reason: "is no longer used: QueueBox no longer installs a NOTIFY trigger (it serialised your application's commits) and wakes up by probing every outbox.probeIntervalMs instead; remove the key"})
		cfg.Outbox.Notify = nil
	}
	return &Loaded{Config: cfg, File: name, Secrets: secrets, Compiled: compiled, Warnings: warnings, Unset: d.unset, raw: d.raw, fromEnv: d.fromEnv, present: d.present}, nil
}

// FromConfig validates a configuration built in code (the dev mode).
func FromConfig(cfg *Config) (*Loaded, error) {
	cfg.applyDestinationDefaults()
	d := newDecoder(nil, nil)
	ps, compiled := validate(cfg, d)
	if len(ps) > 0 {
		return nil, &Error{File: "(generated)", Problems: ps}
	}
	secrets := NewSecrets()
	collectSecrets(cfg, secrets)
	return &Loaded{Config: cfg, File: "(generated)", Secrets: secrets, Compiled: compiled}, nil
}

type decoder struct {
	problems []Problem
	lines    map[string]int
	present  map[string]bool
	// bad marks keys that already have a problem: validation adds no
	// second one, since a value that could not be read says nothing more.
	bad map[string]bool
	raw map[string]string
	// skip holds keys whose value in the file is not used.
	skip map[string]bool
	// fromEnv names the environment variable that replaced a key whole,
	// by key path: problems with its value name the variable.
	fromEnv map[string]string
	env     func(string) (string, bool)
	secrets *Secrets
	// null holds the keys written as YAML's empty value (null or ~,
	// unquoted), which a text key reads as "".
	null map[string]bool
	// kind is the type of the destination or inbox source being decoded
	// ("" elsewhere, or when its type is not known): the keys offered for
	// an unknown key are those of that type.
	kind string
	// forTools sets aside the variables that are not set outside
	// database.* (in unset) rather than reporting them (LoadForTools).
	forTools bool
	unset    []Problem
	// fresh, when it knows the type, makes the value a pointer of that
	// type starts from where the file gives one (an outbox of outboxes).
	fresh func(reflect.Type) (reflect.Value, bool)
}

// databaseKey says whether a key path is in a database block: the top
// level's, or an outbox's.
func databaseKey(path string) bool {
	if strings.HasPrefix(path, "database.") {
		return true
	}
	rest, ok := strings.CutPrefix(path, "outboxes.")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ".")
	return ok && strings.HasPrefix(rest, "database.")
}

// usesVariable says whether a value of the file uses ${name}.
func usesVariable(raw map[string]string, name string) bool {
	for _, v := range raw {
		if strings.Contains(v, "${"+name+"}") || strings.Contains(v, "${"+name+":-") {
			return true
		}
	}
	return false
}

// outboxesLast returns the top-level mapping n with its outboxes key moved
// to the end, so that it is decoded after the keys its outboxes inherit.
func outboxesLast(n *yaml.Node) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return n
	}
	m := *n
	m.Content = make([]*yaml.Node, 0, len(n.Content))
	var last []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "outboxes" {
			last = append(last, n.Content[i], n.Content[i+1])
			continue
		}
		m.Content = append(m.Content, n.Content[i], n.Content[i+1])
	}
	m.Content = append(m.Content, last...)
	return &m
}

func newDecoder(env func(string) (string, bool), secrets *Secrets) *decoder {
	if secrets == nil {
		secrets = NewSecrets()
	}
	return &decoder{lines: map[string]int{}, present: map[string]bool{}, bad: map[string]bool{}, raw: map[string]string{}, skip: map[string]bool{}, null: map[string]bool{},
		fromEnv: map[string]string{}, env: env, secrets: secrets}
}

func (d *decoder) add(path string, line int, format string, args ...any) {
	d.bad[displayPath(path)] = true
	d.problems = append(d.problems, Problem{Key: displayPath(path), Line: line, Reason: fmt.Sprintf(format, args...)})
}

func displayPath(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) freshOf(t reflect.Type) (reflect.Value, bool) {
	if d.fresh == nil {
		return reflect.Value{}, false
	}
	return d.fresh(t)
}

var textUnmarshaler = reflect.TypeOf((*interface{ UnmarshalText([]byte) error })(nil)).Elem()

// decode fills v from n, reporting every problem with its key path and line.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.present[path] = true
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		if n.Value != "" {
			d.null[path] = true // null or ~ written out
		}
		return // an empty value keeps the default
	}
	if reflect.PointerTo(v.Type()).Implements(textUnmarshaler) {
		d.scalar(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if f, ok := d.freshOf(v.Type().Elem()); ok {
				v.Set(f)
			} else {
				v.Set(reflect.New(v.Type().Elem()))
			}
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "expected a mapping of keys, got %s", describe(n))
			return
		}
		fields := fieldsOf(v.Type())
		if types := typesOf(v.Type()); types != nil {
			saved := d.kind
			d.kind = typeIn(n, types)
			defer func() { d.kind = saved }()
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			key := join(path, k.Value)
			if d.twice(seen, k, key) {
				continue
			}
			d.lines[key] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				offered := d.offered(fields)
				d.add(key, k.Line, "unknown key%s; the keys here are %s", suggest(k.Value, offered), strings.Join(sortedKeys(offered), ", "))
				continue
			}
			if d.skip[key] {
				continue
			}
			fv := v.Field(f.index)
			d.decode(val, fv, key)
			if d.zeroRefused(val, fv, f.field, key) {
				continue
			}
			d.checkRange(val, fv, f.field, key)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "expected a mapping, got %s", describe(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			key := join(path, k.Value)
			if d.twice(seen, k, key) {
				continue
			}
			d.lines[key] = k.Line
			ev := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, ev, key)
			v.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.add(path, n.Line, "expected a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			key := fmt.Sprintf("%s[%d]", path, i)
			d.lines[key] = item.Line
			d.decode(item, s.Index(i), key)
		}
		v.Set(s)
	default:
		d.scalar(n, v, path)
	}
}

var (
	envRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)
	// envWholeRE matches a value that is one substitution and nothing else.
	envWholeRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}$`)
)

// scalar decodes one scalar after ${VAR} substitution.
//
// ${NAME:-default} takes the default when NAME is unset or empty, as in a
// shell or Compose file. The substituted text is read as the key's type:
// a number key takes "${BATCH:-500}" as 500 whether or not it is quoted,
// when the whole value is one substitution; a text key keeps the text as
// it is ("${PORT}" stays "5432", not a number).
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.add(path, n.Line, "expected a single value, got %s", describe(n))
		return
	}
	node := *n
	if d.env != nil && strings.Contains(n.Value, "${") && n.Tag != "!!binary" {
		failed := false
		node.Value = envRE.ReplaceAllStringFunc(n.Value, func(m string) string {
			sub := envRE.FindStringSubmatch(m)
			val, ok := d.env(sub[1])
			if ok && (val != "" || sub[2] == "") {
				d.secrets.AddFromEnv(val)
				return val
			}
			if sub[2] != "" {
				return sub[3]
			}
			failed = true
			reason := fmt.Sprintf("the environment variable %s is not set; set it, or give a default as ${%s:-value}", sub[1], sub[1])
			if d.forTools && !databaseKey(path) {
				// The key stays empty; marking it bad keeps validation
				// from reporting it empty as well.
				d.bad[displayPath(path)] = true
				d.unset = append(d.unset, Problem{Key: displayPath(path), Line: n.Line, Reason: reason})
				return ""
			}
			d.add(path, n.Line, "%s", reason)
			return ""
		})
		if failed {
			return
		}
		d.raw[path] = n.Value
		plain := n.Style == 0 || n.Style == yaml.TaggedStyle
		if v.Kind() == reflect.String {
			node.Tag, node.Style = "!!str", 0
		} else if plain || envWholeRE.MatchString(n.Value) {
			node.Tag, node.Style = "", 0 // re-resolve the type of the substituted text
		}
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		if node.ShortTag() == "!!float" && !reflect.PointerTo(v.Type()).Implements(textUnmarshaler) {
			d.wholeFloat(&node, v, path, n.Line)
			return
		}
	}
	if err := node.Decode(v.Addr().Interface()); err != nil {
		reason := scalarError(err, v, node.Value)
		if why, ok := textForScalar(&node, v.Type()); ok {
			reason = strings.Replace(reason, fmt.Sprintf("got %q", node.Value), "got "+why, 1)
			if raw, ok := d.raw[path]; ok && node.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
				reason = strings.Replace(reason, "; write it without quotes", fmt.Sprintf(" (from %q); write it without quotes", raw), 1)
			}
		}
		if dur, err := time.ParseDuration(node.Value); err == nil && strings.HasSuffix(path, "Ms") {
			// claimTimeoutMs: 30s
			reason += fmt.Sprintf("; the key counts milliseconds: write %d", dur.Milliseconds())
		}
		d.add(path, n.Line, "%s", reason)
	}
}

// textForScalar explains why a value that reads as a number or a boolean
// is refused by a number or boolean key: quotes or a !!str tag make it
// text, and YAML's types are kept strict (only a value that is one ${NAME}
// substitution is read again as the key's type). It says what to write,
// and reports false when the value would not fit the key without them.
func textForScalar(node *yaml.Node, t reflect.Type) (string, bool) {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64, reflect.Bool:
	default:
		return "", false
	}
	if t.PkgPath() != "" {
		return "", false
	}
	quoted := node.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0
	tagged := node.Tag == "!!str" && node.Style&yaml.TaggedStyle != 0
	if !quoted && !tagged {
		return "", false
	}
	plain := *node
	plain.Tag, plain.Style = "", 0
	probe := newDecoder(nil, nil)
	probe.scalar(&plain, reflect.New(t).Elem(), "")
	if len(probe.problems) > 0 {
		return "", false
	}
	switch {
	case quoted && tagged:
		return fmt.Sprintf("the quoted text %q, tagged !!str; write it without the tag and the quotes", node.Value), true
	case quoted:
		return fmt.Sprintf("the quoted text %q; write it without quotes", node.Value), true
	}
	return fmt.Sprintf("%q, which the !!str tag makes text; remove the tag", node.Value), true
}

// wholeFloat reads a number written with a decimal point or an exponent
// into a whole-number key. YAML would truncate 2.5 to 2: a fraction is
// refused. A whole value (1e3, 1000.0) is that number, as JSON Schema's
// integer takes it too. The text is read exactly, not as a float64, which
// would round 500.0000000000000001 to 500 and 9007199254740993.0 to its
// even neighbour.
func (d *decoder) wholeFloat(node *yaml.Node, v reflect.Value, path string, line int) {
	r, exact := new(big.Rat).SetString(strings.ReplaceAll(node.Value, "_", ""))
	if !exact {
		// .inf, .nan and the like: no number at all.
		d.add(path, line, "expected a whole number, got %q", node.Value)
		return
	}
	if !r.IsInt() {
		lo := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: rounds down
		hi := new(big.Int).Add(lo, big.NewInt(1))
		d.add(path, line, "expected a whole number, got %q, which has a fraction; write %s or %s", node.Value, lo, hi)
		return
	}
	n := r.Num()
	if !n.IsInt64() || v.OverflowInt(n.Int64()) {
		d.add(path, line, "expected a whole number, got %q, which is too large for one", node.Value)
		return
	}
	v.SetInt(n.Int64())
}

// twice reports a key given a second time in one mapping. YAML parsers
// differ on which one wins, so neither does: the file is refused.
func (d *decoder) twice(seen map[string]int, k *yaml.Node, key string) bool {
	if first, ok := seen[k.Value]; ok {
		d.add(key, k.Line, "is given twice (first on line %d); keep one", first)
		return true
	}
	seen[k.Value] = k.Line
	return false
}

func scalarError(err error, v reflect.Value, got string) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	want := ""
	switch v.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		want = "a whole number"
	case reflect.Float64:
		want = "a number"
	case reflect.Bool:
		want = "true or false"
	case reflect.String:
		want = "text"
	}
	if want != "" && v.Type().PkgPath() == "" {
		return fmt.Sprintf("expected %s, got %q", want, got)
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "line ") {
		msg = msg[i+2:]
	}
	return msg
}

// zeroRefused refuses a zero (or empty) value written out for a key whose
// zero would otherwise be replaced by a default: the file says 0, and the
// relay would run with something else. The key's zero tag says why 0 cannot
// be honoured and what to write. A key left empty (`burst:`) keeps its
// default, as everywhere. It reports whether it refused the value.
func (d *decoder) zeroRefused(n *yaml.Node, v reflect.Value, f reflect.StructField, path string) bool {
	reason, ok := f.Tag.Lookup("zero")
	if !ok || d.bad[displayPath(path)] || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") || !v.IsZero() {
		return false
	}
	if v.Kind() == reflect.String {
		d.add(path, n.Line, "is empty; %s", reason)
		return true
	}
	shown := n.Value
	if strings.Contains(shown, "${") {
		shown = fmt.Sprint(v.Interface())
	}
	d.add(path, n.Line, "%s %s", shown, reason)
	return true
}

func (d *decoder) checkRange(n *yaml.Node, v reflect.Value, f reflect.StructField, path string) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value keeps the default
	}
	minS, hasMin := f.Tag.Lookup("min")
	maxS, hasMax := f.Tag.Lookup("max")
	if above, ok := f.Tag.Lookup("above"); ok {
		// A bound that the value must exceed: min would offer the bound
		// itself, which the key cannot take.
		lo, _ := strconv.ParseFloat(above, 64)
		if x := v.Float(); x <= lo || (hasMax && x > mustFloat(maxS)) {
			d.add(path, n.Line, "%v is out of range; use a number above %s, up to %s", fmtNum(x), above, maxS)
		}
		return
	}
	if !hasMin && !hasMax {
		return
	}
	var x float64
	switch v.Kind() {
	case reflect.Int:
		x = float64(v.Int())
	case reflect.Float64:
		x = v.Float()
	default:
		return
	}
	lo, _ := strconv.ParseFloat(minS, 64)
	hi, _ := strconv.ParseFloat(maxS, 64)
	if (hasMin && x < lo) || (hasMax && x > hi) {
		d.add(path, n.Line, "%v is out of range; use a value from %s to %s", fmtNum(x), minS, maxS)
	}
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func mustFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

type fieldInfo struct {
	index int
	field reflect.StructField
}

func fieldsOf(t reflect.Type) map[string]fieldInfo {
	out := map[string]fieldInfo{}
	for i := range t.NumField() {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name != "" && name != "-" {
			out[name] = fieldInfo{i, f}
		}
	}
	return out
}

// typesOf returns the types of a struct whose keys depend on its type key
// (a destination, an inbox source), or nil.
func typesOf(t reflect.Type) []string {
	switch t {
	case reflect.TypeFor[DestinationConfig]():
		return DestinationTypes
	case reflect.TypeFor[InboxSourceConfig]():
		return SourceTypes
	}
	return nil
}

// typeIn returns the value of the type key of mapping n when it is one of
// types, else "".
func typeIn(n *yaml.Node, types []string) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if val.Kind == yaml.AliasNode {
			val = val.Alias
		}
		if k.Value == "type" && val.Kind == yaml.ScalarNode && oneOf(val.Value, types...) {
			return val.Value
		}
	}
	return ""
}

// offered is the keys to offer for an unknown key among fields: without
// retired keys (they load, with a warning to remove them), and inside a
// destination or source of a known type, only the keys of that type.
func (d *decoder) offered(fields map[string]fieldInfo) map[string]fieldInfo {
	out := map[string]fieldInfo{}
	for name, f := range fields {
		if _, retired := f.field.Tag.Lookup("retired"); retired {
			continue
		}
		if kinds, ok := f.field.Tag.Lookup("kinds"); ok && d.kind != "" && !oneOf(d.kind, strings.Split(kinds, ",")...) {
			continue
		}
		out[name] = f
	}
	return out
}

func sortedKeys(m map[string]fieldInfo) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// suggest offers the closest known key for a typo.
func suggest(key string, fields map[string]fieldInfo) string {
	best, bestD := "", 4
	for k := range fields {
		if d := distance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
