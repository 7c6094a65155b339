package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks/cloudevents"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// DestinationTypes are the destination kinds.
var DestinationTypes = []string{"http", "rabbitmq", "kafka", "nats", "null"}

type validator struct {
	d        *decoder
	problems []Problem
	out      *Compiled
}

// Compiled is what validation compiled from the configuration: the router,
// the address templates and the decoded signing secrets. Wiring uses it as
// it is, so that nothing is compiled twice and nothing that validated can
// fail to compile later.
type Compiled struct {
	// Router is the top level's routes' (nil when a file of outboxes has
	// none there); Routers those of each outbox with routes of its own.
	Router       *routing.Router
	Routers      map[string]*routing.Router
	Destinations map[string]*CompiledDestination
	Sources      map[string]*CompiledSource
}

// CompiledDestination holds a destination's compiled keys; a template is
// nil where its key is empty or does not apply to the type.
type CompiledDestination struct {
	URL, Exchange, RoutingKey, Topic, Subject *routing.Template
	// SigningKeys are the decoded signing secrets, in the order given;
	// none for an unsigned destination.
	SigningKeys [][]byte
	// CloudEvents is the compiled cloudEvents key; nil without one.
	CloudEvents *cloudevents.Config
}

// CompiledSource holds an inbox source's compiled templates and its
// decoded signing secrets (inbox.go).
type CompiledSource struct {
	Topic, AggregateType, AggregateID *routing.Template
	SigningKeys                       [][]byte
}

func (v *validator) add(key, format string, args ...any) {
	if v.d.bad[key] {
		return // reading the value failed already: one problem, one line
	}
	p := Problem{Key: key, Line: v.line(key), Reason: fmt.Sprintf(format, args...)}
	if name, ok := v.d.fromEnv[key]; ok {
		// The value is the variable's, not the file's: no line.
		p.Key, p.Line = fmt.Sprintf("%s (from %s)", key, name), 0
	}
	v.problems = append(v.problems, p)
}

// line finds the line of key, or of its nearest parent that has one.
func (v *validator) line(key string) int {
	for k := key; k != ""; {
		if l, ok := v.d.lines[k]; ok {
			return l
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}

// Names returns the table and column names of the configuration's
// database block (of one outbox's view: Loaded.Outbox).
func (c *Config) Names() dialects.Names { return namesOf(&c.Database) }

func namesOf(db *DatabaseConfig) dialects.Names {
	return dialects.Names{
		Schema:        db.Schema,
		Outbox:        db.OutboxTableName,
		Inbox:         db.InboxTableName,
		OutboxColumns: db.ColumnMapping.Outbox,
		InboxColumns:  db.ColumnMapping.Inbox,
	}
}

// validate checks c and compiles what wiring needs. The Compiled result is
// complete only when there are no problems.
func validate(c *Config, d *decoder) ([]Problem, *Compiled) {
	v := &validator{d: d, out: &Compiled{Destinations: map[string]*CompiledDestination{}, Sources: map[string]*CompiledSource{}, Routers: map[string]*routing.Router{}}}
	_, many := d.lines["outboxes"]
	if !many {
		v.database("database", &c.Database)
	}
	v.outboxBlock("outbox", &c.Outbox)
	if !oneOf(c.Log.Format, "json", "text") {
		v.add("log.format", "%q is not a log format; use json or text", c.Log.Format)
	}
	if !oneOf(strings.ToLower(c.Log.Level), "debug", "info", "warn", "error") {
		v.add("log.level", "%q is not a level; use debug, info, warn or error", c.Log.Level)
	}
	v.admin(c)
	v.destinations(c)
	if many {
		v.outboxes(c)
	} else {
		v.out.Router = v.routes("routes", c.Routes, c)
	}
	v.inbox(c)
	v.inboxOutbox(c)
	return v.problems, v.out
}

// database checks a database block (key is its key path: database, or
// outboxes.NAME.database).
func (v *validator) database(key string, db *DatabaseConfig) {
	if !oneOf(db.Dialect, "postgresql", "sqlserver") {
		v.add(key+".dialect", "%q is not a dialect; use postgresql or sqlserver", db.Dialect)
	}
	v.databaseURL(key, db)
	v.wakeups(key, db)
	for _, p := range namesOf(db).Validate() {
		v.add(key+strings.TrimPrefix(p.Key, "database"), "%s", p.Reason)
	}
}

// outboxBlock checks an outbox block (key: outbox, or
// outboxes.NAME.outbox).
func (v *validator) outboxBlock(key string, o *OutboxConfig) {
	if o.Backoff.MaxMs < o.Backoff.InitialMs {
		v.add(key+".backoff.maxMs", "%d is below %s.backoff.initialMs (%d); the longest delay cannot be shorter than the first", o.Backoff.MaxMs, key, o.Backoff.InitialMs)
	}
	if o.History.AllDeliveries && !o.History.Enabled {
		v.add(key+".history.allDeliveries", "is true while %s.history.enabled is false, which records nothing at all; set enabled: true to record every delivery, or remove allDeliveries", key)
	}
}

// databaseURL checks database.url. A value from QUEUEBOX_DATABASE_URL is
// reported as the variable's (add names it), with what to do about it.
func (v *validator) databaseURL(block string, db *DatabaseConfig) {
	const example = "postgres://user:password@host:5432/app or sqlserver://user:password@host:1433?database=app"
	key := block + ".url"
	name, fromEnv := v.d.fromEnv[key]
	// What to do instead of fixing the variable: unset it, so that the
	// file's value is used.
	unset := "unset it and set database.url in the file"
	if line, ok := v.d.lines[key]; ok {
		unset = fmt.Sprintf("unset it to use database.url from the file (line %d)", line)
	}
	u, err := url.Parse(db.URL)
	switch {
	case strings.TrimSpace(db.URL) == "" && fromEnv:
		v.add(key, "holds only blanks; set %s to the URL of the database, or %s", name, unset)
	case strings.TrimSpace(db.URL) == "":
		if block == "database" {
			v.add(key, "is required: the URL of the database that holds the outbox table (or set QUEUEBOX_DATABASE_URL)")
		} else {
			v.add(key, "is required: the URL of the database that holds this outbox's table")
		}
	case (err != nil || u.Scheme == "") && fromEnv:
		v.add(key, "is not a URL; set %s to one like %s, or %s", name, example, unset)
	case err != nil || u.Scheme == "":
		v.add(key, "is not a URL; write it like %s", example)
	default:
		want := map[string][]string{"postgresql": {"postgres", "postgresql"}, "sqlserver": {"sqlserver", "mssql"}}[db.Dialect]
		if want != nil && !oneOf(u.Scheme, want...) {
			fix := ""
			if fromEnv {
				fix = fmt.Sprintf("; fix %s, or %s", name, unset)
			}
			v.add(key, "starts with %s://, which does not fit %s.dialect %s (expected %s://)%s", u.Scheme, block, db.Dialect, want[0], fix)
		}
	}
}

// wakeups checks database.wakeups. Only PostgreSQL has logical
// replication, so logical on SQL Server could never start.
func (v *validator) wakeups(block string, db *DatabaseConfig) {
	key := block + ".wakeups"
	modes := make([]string, len(dialects.WakeupModes))
	for i, m := range dialects.WakeupModes {
		modes[i] = string(m)
	}
	switch {
	case !oneOf(db.Wakeups, modes...):
		v.add(key, "%q is not a kind of wake-up; use auto, logical or probe", db.Wakeups)
	case db.Wakeups == string(dialects.WakeupsLogical) && db.Dialect == "sqlserver":
		v.add(key, "logical needs PostgreSQL's logical replication, which SQL Server does not have; use auto or probe")
	}
}

func (v *validator) admin(c *Config) {
	if !oneOf(c.Admin.Ready, "any", "all") {
		v.add("admin.ready", "%q: use any (/readyz answers 200 while at least one outbox is ready) or all (only while every outbox is)", c.Admin.Ready)
	}
	host, port, err := net.SplitHostPort(c.Admin.Listen)
	if err != nil || port == "" {
		v.add("admin.listen", "%q is not host:port (for example 127.0.0.1:8080)", c.Admin.Listen)
		return
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && c.Admin.Token == "" && !v.d.bad["admin.token"] { // an unreadable token has its own problem
		v.add("admin.listen", "%q is reachable from other machines, and admin.token is empty; set admin.token, or listen on 127.0.0.1", c.Admin.Listen)
	}
}

func (v *validator) destinations(c *Config) {
	names := make([]string, 0, len(c.Destinations))
	for n := range c.Destinations {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		d := c.Destinations[name]
		key := "destinations." + name
		if d == nil {
			v.add(key, "is empty; give it a type (%s)", strings.Join(DestinationTypes, ", "))
			continue
		}
		if d.Type == "" && v.d.null[key+".type"] {
			// type: null, unquoted, is YAML's empty value, not the name.
			v.add(key+".type", "is empty: null without quotes is YAML's empty value; for the null destination write type: \"null\"")
			continue
		}
		if d.Type == "" {
			v.add(key+".type", "is required; use one of %s", strings.Join(DestinationTypes, ", "))
			continue
		}
		if !oneOf(d.Type, DestinationTypes...) {
			v.add(key+".type", "%q is not a destination type; use one of %s", d.Type, strings.Join(DestinationTypes, ", "))
			continue
		}
		v.foreignKeys(key, d.Type, "destination", reflect.TypeOf(*d))
		v.flowControl(key, name, d)
		cd := &CompiledDestination{}
		v.out.Destinations[name] = cd
		switch d.Type {
		case "http":
			v.httpDestination(key, d, cd)
		case "rabbitmq":
			v.required(key+".url", d.URL)
			v.brokerURL(key+".url", d.URL, "amqp://user:password@host:5672/vhost (amqps:// for TLS)", "amqp", "amqps")
			switch {
			case d.Exchange == "" && d.ExchangeFrom == "":
				v.add(key, "needs exchange (a template) or exchangeFrom: aggregate_type")
			case d.Exchange != "" && d.ExchangeFrom != "":
				v.add(key+".exchangeFrom", "cannot be combined with exchange; keep one of the two")
			case d.ExchangeFrom != "" && d.ExchangeFrom != "aggregate_type":
				v.add(key+".exchangeFrom", "%q is not supported; the only value is aggregate_type", d.ExchangeFrom)
			}
			cd.Exchange = v.template(key+".exchange", d.Exchange)
			if d.ExchangeFrom == "aggregate_type" && d.Exchange == "" {
				cd.Exchange = v.template(key+".exchangeFrom", "{{ aggregateType }}")
			}
			cd.RoutingKey = v.template(key+".routingKey", d.RoutingKey)
		case "kafka":
			if len(d.Brokers) == 0 {
				v.add(key+".brokers", "is required: a list of host:port")
			}
			for i, b := range d.Brokers {
				if h, p, err := net.SplitHostPort(b); err != nil || h == "" || p == "" {
					v.add(fmt.Sprintf("%s.brokers[%d]", key, i), "%q is not host:port (for example kafka-1:9092)", b)
				}
			}
			v.kafkaSecurity(key, d.SASL, d.TLS)
			v.required(key+".topic", d.Topic)
			cd.Topic = v.template(key+".topic", d.Topic)
			if !oneOf(d.Acks, "all", "one") {
				v.add(key+".acks", "%q: use all or one", d.Acks)
			}
			if !oneOf(d.Compression, "none", "gzip", "snappy", "lz4", "zstd") {
				v.add(key+".compression", "%q: use none, gzip, snappy, lz4 or zstd", d.Compression)
			}
			if !oneOf(d.Partitioner, "murmur2", "fnv1a") {
				v.add(key+".partitioner", "%q: use murmur2 or fnv1a", d.Partitioner)
			}
		case "nats":
			v.required(key+".url", d.URL)
			for _, u := range strings.Split(d.URL, ",") {
				v.brokerURL(key+".url", strings.TrimSpace(u), "nats://host:4222 (tls:// for TLS; a comma-separated list for a cluster)", "nats", "tls", "ws", "wss")
			}
			v.required(key+".subject", d.Subject)
			cd.Subject = v.template(key+".subject", d.Subject)
		}
		v.cloudEvents(key, d, cd)
	}
}

// kafkaSecurity checks the sasl and tls keys of a Kafka destination or
// Kafka inbox source (key is the destination's or the source's).
func (v *validator) kafkaSecurity(key string, s SASLConfig, t TLSConfig) {
	if t.CAFile != "" && !t.Enabled {
		v.add(key+".tls.caFile", "is set but tls.enabled is false, so it would be ignored; set tls.enabled: true to use TLS, or remove it")
	}
	if t.InsecureSkipVerify && !t.Enabled {
		v.add(key+".tls.insecureSkipVerify", "is set but tls.enabled is false, so it would be ignored; set tls.enabled: true to use TLS, or remove it")
	}
	switch {
	case !oneOf(s.Mechanism, "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
		v.add(key+".sasl.mechanism", "%q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, or leave it empty", s.Mechanism)
	case s.Mechanism == "" && (s.Username != "" || s.Password != ""):
		v.add(key+".sasl.mechanism", "is required with sasl.username and sasl.password: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	case s.Mechanism != "":
		if strings.TrimSpace(s.Username) == "" {
			v.add(key+".sasl.username", "is required with sasl.mechanism %s", s.Mechanism)
		}
		if s.Password == "" {
			v.add(key+".sasl.password", "is required with sasl.mechanism %s (keep it in an environment variable: \"${KAFKA_PASSWORD}\")", s.Mechanism)
		}
	}
}

// foreignKeys reports keys set under key that belong to another type than
// typ: struct fields carry the types they apply to in a `kinds` tag.
func (v *validator) foreignKeys(key, typ, what string, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		kinds, ok := f.Tag.Lookup("kinds")
		yk := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if ok && v.d.present[key+"."+yk] && !oneOf(typ, strings.Split(kinds, ",")...) {
			v.add(key+"."+yk, "is not a key of a %s %s (it belongs to %s)", typ, what, strings.ReplaceAll(kinds, ",", ", "))
		}
	}
}

// brokerURL checks that a broker URL has one of the schemes and a host. An
// empty value is reported by required.
func (v *validator) brokerURL(key, val, example string, schemes ...string) {
	if strings.TrimSpace(val) == "" {
		return
	}
	u, err := url.Parse(val)
	if err != nil || !oneOf(u.Scheme, schemes...) || u.Host == "" {
		v.add(key, "%q is not a URL of the form %s", redactURL(val), example)
	}
}

// redactURL hides a URL's password in a problem report.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
	}
	return s
}

func (v *validator) required(key, val string) {
	if strings.TrimSpace(val) == "" {
		v.add(key, "is required")
	}
}

func (v *validator) template(key, s string) *routing.Template {
	if s == "" {
		return nil
	}
	t, err := routing.ParseTemplate(s)
	if err != nil {
		v.add(key, "%v", err)
	}
	return t
}

func (v *validator) httpDestination(key string, d *DestinationConfig, cd *CompiledDestination) {
	v.required(key+".url", d.URL)
	if cd.URL = v.template(key+".url", d.URL); cd.URL != nil {
		// Placeholders stand for a value; the scheme and host must be there.
		probe := placeholderProbe.ReplaceAllString(d.URL, "x")
		if u, err := url.Parse(probe); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(key+".url", "%q is not an http:// or https:// URL with a host", d.URL)
		}
	}
	if !oneOf(d.Method, "POST", "PUT", "PATCH") {
		v.add(key+".method", "%q: use POST, PUT or PATCH", d.Method)
	}
	for i, s := range d.NonRetryableStatus {
		if s < 100 || s > 599 {
			v.add(fmt.Sprintf("%s.nonRetryableStatus[%d]", key, i), "%d is not an HTTP status", s)
		} else if s >= 200 && s < 300 {
			v.add(fmt.Sprintf("%s.nonRetryableStatus[%d]", key, i), "%d is a success status; only failures can be non-retryable", s)
		}
	}
	cd.SigningKeys = v.signingKeys(key, d.SigningSecret, d.SigningSecrets)
	if v.d.present[key+".tls.enabled"] {
		v.add(key+".tls.enabled", "tls.enabled does not apply to http destinations: the https:// scheme turns TLS on; remove it")
	}
	names := make([]string, 0, len(d.Headers))
	for name := range d.Headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !isHeaderToken(name) {
			v.add(key+".headers", "%q is not a valid header name: HTTP allows letters, digits and !#$%%&'*+-.^_`|~ only (X-Api-Key, for example)", name)
		} else if i := strings.IndexFunc(d.Headers[name], isHeaderControl); i >= 0 {
			v.add(key+".headers", "the value of %s holds the control character %U at byte %d, which HTTP cannot send; remove it", name, []rune(d.Headers[name][i:])[0], i)
		}
	}
	v.headerCase(key+".headers", names)
}

// headerCase refuses header names that differ only in case, as a key given
// twice: HTTP takes them as one header, and the sink sets them from a map,
// so which value would be sent varies from message to message.
func (v *validator) headerCase(key string, names []string) {
	spellings := map[string][]string{}
	var canonical []string
	for _, name := range names {
		c := textproto.CanonicalMIMEHeaderKey(name)
		if spellings[c] == nil {
			canonical = append(canonical, c)
		}
		spellings[c] = append(spellings[c], name)
	}
	for _, c := range canonical {
		group := spellings[c]
		if len(group) < 2 {
			continue
		}
		// In the order of the file; the problem is on the last one.
		sort.SliceStable(group, func(i, j int) bool { return v.d.lines[key+"."+group[i]] < v.d.lines[key+"."+group[j]] })
		quoted := make([]string, len(group))
		for i, g := range group {
			quoted[i] = fmt.Sprintf("%q", g)
		}
		list := strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
		v.add(key+"."+group[len(group)-1], "%s name one header: HTTP ignores the case of header names, and which of the values would be sent varies; keep one", list)
	}
}

// isHeaderToken reports whether s is an HTTP token (RFC 9110 5.6.2), the
// only characters a header name may hold.
func isHeaderToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// isHeaderControl reports a character a header value cannot hold: the C0
// controls except tab, and DEL.
func isHeaderControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }

var placeholderProbe = regexp.MustCompile(`\{\{[^{}]*\}\}`)

// signingKeys checks and decodes the signingSecret and signingSecrets of an
// HTTP destination or HTTP source (key is its key). signingSecrets is the
// list, in order; signingSecret alone is a list of one. Given both,
// signingSecrets wins, and signingSecret must be one of its secrets: a
// secret written only there would silently not be used.
func (v *validator) signingKeys(key, single string, list []string) [][]byte {
	listKey := key + ".signingSecrets"
	if !v.d.present[listKey] || v.d.null[listKey] {
		if single == "" {
			return nil
		}
		k, err := DecodeSigningSecret(single)
		if err != nil {
			v.add(key+".signingSecret", "%v", err)
			return nil
		}
		return [][]byte{k}
	}
	if v.d.bad[listKey] {
		return nil // not a list: reported already
	}
	if len(list) == 0 {
		v.add(listKey, "is empty; give one secret or more (the new one first while you rotate), or remove the key")
		return nil
	}
	var keys [][]byte
	seen := map[string]int{}
	unread := v.d.bad[key+".signingSecret"]
	for i, s := range list {
		ik := fmt.Sprintf("%s[%d]", listKey, i)
		if v.d.bad[ik] {
			unread = true // reported already
			continue
		}
		if strings.TrimSpace(s) == "" {
			v.add(ik, "is empty; give a secret (whsec_ and its base64), or remove the entry")
			continue
		}
		if first, ok := seen[s]; ok {
			v.add(ik, "is the same secret as %s[%d]; list each secret once", listKey, first)
			continue
		}
		seen[s] = i
		k, err := DecodeSigningSecret(s)
		if err != nil {
			v.add(ik, "%v", err)
			continue
		}
		keys = append(keys, k)
	}
	if _, ok := seen[single]; single != "" && !ok && !unread {
		v.add(key+".signingSecret", "is not one of signingSecrets, which replaces it: this secret would not be used. Remove signingSecret, or add its secret to signingSecrets")
	}
	return keys
}

// DecodeSigningSecret decodes a Standard Webhooks secret: "whsec_" and the
// base64 of at least 16 bytes. The prefix is required, as the receivers'
// libraries expect it; a secret without it is most often one copied
// without its first characters.
func DecodeSigningSecret(s string) ([]byte, error) {
	if !strings.HasPrefix(s, "whsec_") {
		return nil, errors.New("does not start with whsec_: a Standard Webhooks secret is whsec_ followed by the base64 of at least 16 random bytes (for example whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM=); copy the whole secret")
	}
	return httpsink.DecodeSigningSecret(s)
}

// routes checks and compiles a list of routes (key: routes, or
// outboxes.NAME.routes); nil when there are none.
func (v *validator) routes(key string, list []RouteConfig, c *Config) *routing.Router {
	if len(list) == 0 {
		v.add(key, "no route is configured: every row would go dead with \"no route matches topic\". Add one, for example {topicPattern: \"#\", destination: NAME}")
		return nil
	}
	defined := make([]string, 0, len(c.Destinations))
	for n := range c.Destinations {
		defined = append(defined, n)
	}
	sort.Strings(defined)
	routes := make([]routing.Route, 0, len(list))
	for i, r := range list {
		key := fmt.Sprintf("%s[%d]", key, i)
		route := routing.Route{Name: r.Name}
		var err error
		if r.TopicPattern == "" {
			v.add(key+".topicPattern", "is required (# matches every topic)")
		} else if route.Pattern, err = routing.CompilePattern(r.TopicPattern); err != nil {
			v.add(key+".topicPattern", "%v", err)
		}
		if targets := v.routeDestinations(key, r, c, defined); len(targets) > 0 {
			route.Destination = targets[0]
			if len(targets) > 1 {
				route.Destinations = targets
			}
		}
		if r.Filter != "" {
			if route.Filter, err = routing.CompileFilter(r.Filter); err != nil {
				v.add(key+".filter", "%v; a filter is a jq test of the payload, such as .amount > 100, and the variables are %s", err, strings.Join(routing.TransformVariables, ", "))
			}
		}
		if r.Transform != "" {
			if route.Transform, err = routing.CompileTransform(r.Transform); err != nil {
				v.add(key+".transform", "%v; the variables are %s", err, strings.Join(routing.TransformVariables, ", "))
			}
		}
		routes = append(routes, route)
	}
	return routing.NewRouter(routes)
}

// routeDestinations checks where a route (at key) sends its rows:
// destination, one name, or destinations, a list of names (a fan-out; a
// list of one is the same as destination), never both. Each name must be
// a defined destination, and a list names each once: a row is sent to a
// destination once. It returns the names in order, or nil with a problem.
func (v *validator) routeDestinations(key string, r RouteConfig, c *Config, defined []string) []string {
	listKey := key + ".destinations"
	listed := v.d.present[listKey] || len(r.Destinations) > 0
	switch {
	case listed && r.Destination != "":
		v.add(listKey, "cannot be combined with destination; keep one of the two: destination: NAME sends each row to one destination, destinations: [NAME, OTHER] to each of several")
		return nil
	case !listed && r.Destination == "":
		v.add(key+".destination", "is required: the name of a destination (or destinations: [NAME, OTHER] to send each row to several)")
		return nil
	case !listed:
		if !v.definedDestination(key+".destination", r.Destination, c, defined) {
			return nil
		}
		return []string{r.Destination}
	case v.d.bad[listKey]:
		return nil // not a list: reported already
	case len(r.Destinations) == 0:
		v.add(listKey, "is empty; list the destinations each row goes to (destinations: [NAME, OTHER]), or write destination: NAME for one")
		return nil
	}
	first := map[string]int{}
	ok := true
	for i, name := range r.Destinations {
		ik := fmt.Sprintf("%s[%d]", listKey, i)
		switch prev, twice := first[name]; {
		case v.d.bad[ik]:
			ok = false // reported already
		case strings.TrimSpace(name) == "":
			v.add(ik, "is empty; give the name of a destination, or remove the entry")
			ok = false
		case twice:
			v.add(ik, "%q is listed twice (first as destinations[%d]); a route sends each row to a destination once: list it once", name, prev)
			ok = false
		default:
			first[name] = i
			ok = v.definedDestination(ik, name, c, defined) && ok
		}
	}
	if !ok {
		return nil
	}
	return slices.Clone(r.Destinations)
}

// definedDestination reports whether name is a destination of c, and when
// it is not, says so under key with the names that are.
func (v *validator) definedDestination(key, name string, c *Config, defined []string) bool {
	if c.Destinations[name] != nil {
		return true
	}
	list := "none is defined"
	if len(defined) > 0 {
		list = "the defined ones are " + strings.Join(defined, ", ")
	}
	v.add(key, "%q is not a defined destination; %s", name, list)
	return false
}

// minBreakerTime is the shortest circuit breaker window and probe interval.
const minBreakerTime = 100 * time.Millisecond

// flowControl checks the keys every destination has: its name (the pause
// and circuit tables hold names of up to 255 characters), the rate limit
// and the circuit breaker.
func (v *validator) flowControl(key, name string, d *DestinationConfig) {
	if len(name) > dialects.MaxDestinationName {
		v.add(key, "the name is %d characters long; destination names are at most %d (operators pause them by name)", len(name), dialects.MaxDestinationName)
	}
	// A rateLimit that could not be read (rateLimit: 50) has its problem
	// already: no second one about what it lacks.
	if v.d.present[key+".rateLimit"] && d.RateLimit.PerSecond == 0 && !v.d.bad[key+".rateLimit"] && !v.d.bad[key+".rateLimit.perSecond"] {
		v.add(key+".rateLimit.perSecond", "is required with rateLimit: the rows per second one replica may send this destination (for example 50); remove rateLimit for no limit")
	}
	cb := d.CircuitBreaker
	if cb.Enabled == nil || !*cb.Enabled {
		return
	}
	for _, k := range []struct {
		name string
		d    Duration
	}{{"window", cb.Window}, {"probeInterval", cb.ProbeInterval}} {
		if time.Duration(k.d) < minBreakerTime && !v.d.bad[key+".circuitBreaker."+k.name] {
			v.add(key+".circuitBreaker."+k.name, "%s is too short; use at least %s (or circuitBreaker: {enabled: false} to turn the breaker off)", time.Duration(k.d), minBreakerTime)
		}
	}
}
