package bootstrap

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// A relay serves one outbox or several. A file with a top-level database
// block is one outbox, named DefaultOutbox, exactly as before outboxes
// existed; a file with outboxes names each of its own, with a database
// block of its own and, where they differ from the top level's, its own
// outbox settings and routes. The destinations, admin, engine, shutdown,
// http, inbox and log keys are the relay's, shared by every outbox.
//
// The code that runs or reads one outbox sees it as a Loaded of its own
// (Loaded.ForOutbox): the same file, with Database, Outbox and Routes those of
// the outbox. So a relay of one outbox runs through the same code as one
// of many.

// DefaultOutbox is the name of the one outbox of a file with a top-level
// database block: in metric labels, /api/stats and --outbox.
const DefaultOutbox = "default"

// outboxNameRE is what an outbox's name may hold: it is a metric label, a
// value of --outbox and part of log lines.
var outboxNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// maxOutboxName bounds an outbox's name.
const maxOutboxName = 63

// defaultPool is an outbox's connection pool when it sets none and no cap
// divides engine.maxConnections (DatabaseConfig's default).
const defaultPool = 10

// minPool is the smallest pool an outbox works with: a claim and a
// completion at once.
const minPool = 2

// outboxes checks the outboxes key: not with a top-level database, at
// least one, names fit for labels and flags, each database block, no two
// outboxes on one table, each outbox's routes, and the pools against
// engine.maxConnections.
func (v *validator) outboxes(c *Config) {
	if _, both := v.d.lines["database"]; both {
		v.add("outboxes", "cannot be combined with a top-level database block: a file is either one outbox (database) or several (outboxes). Move the database block into outboxes as an outbox of its own (outboxes: {%s: {database: ...}}), or remove outboxes", DefaultOutbox)
		return
	}
	if len(c.Outboxes) == 0 {
		if !v.d.bad["outboxes"] {
			v.add("outboxes", "is empty; give each outbox a name and a database block (outboxes: {orders: {database: {url: ...}}}), or write one top-level database block for a single outbox")
		}
		return
	}
	names := c.OutboxNames()
	tables := map[string]string{}
	for _, name := range names {
		o := c.Outboxes[name]
		key := "outboxes." + name
		if !outboxNameRE.MatchString(name) || len(name) > maxOutboxName {
			v.add(key, "%q is not a usable outbox name: it is a metric label and the value of --outbox; use lowercase letters, digits, '_' and '-', starting with a letter or digit (at most %d)", name, maxOutboxName)
		}
		if o == nil {
			v.add(key, "is empty; give it a database block with the url of the database that holds its table")
			continue
		}
		if _, ok := v.d.lines[key+".database"]; !ok {
			v.add(key+".database", "is required: the database block of this outbox, with at least its url")
			continue
		}
		v.database(key+".database", &o.Database)
		if o.Outbox != nil {
			v.outboxBlock(key+".outbox", o.Outbox)
		}
		if t := tableOf(&o.Database); t != "" {
			if other, ok := tables[t]; ok {
				v.add(key+".database", "names the same table as outboxes.%s (%s); one table is one outbox: remove one of them, or give them different schemas or table names", other, t)
			} else {
				tables[t] = name
			}
		}
		if o.Routes != nil {
			if r := v.routes(key+".routes", o.Routes, c); r != nil {
				v.out.Routers[name] = r
			}
		} else if len(c.Routes) == 0 {
			v.add(key+".routes", "no route is configured for this outbox: write routes at the top level (shared by every outbox) or under outboxes.%s.routes", name)
		}
	}
	if len(c.Routes) > 0 {
		v.out.Router = v.routes("routes", c.Routes, c)
	}
	v.pools(c, names)
}

// tableOf names the table an outbox's database block points at, to find
// two outboxes on one table: the server, the database, the schema and the
// table (the user and the options do not matter). "" when the URL does
// not parse (its own problem).
func tableOf(db *DatabaseConfig) string {
	u, err := url.Parse(db.URL)
	if err != nil || u.Scheme == "" {
		return ""
	}
	database := strings.TrimPrefix(u.Path, "/")
	if q := u.Query().Get("database"); q != "" {
		database = q
	}
	host := u.Hostname()
	if host == "" {
		host = u.Query().Get("host") // a socket folder
	}
	return fmt.Sprintf("%s:%s/%s, schema %q, table %s", host, u.Port(), database, db.Schema, strings.ToLower(db.OutboxTableName))
}

// pools checks the outboxes' pools against engine.maxConnections: the
// pools that are set may not add up to more than the cap, and what is left
// is shared by the outboxes that set none, at least minPool each.
func (v *validator) pools(c *Config, names []string) {
	limit := c.Engine.MaxConnections
	if limit == 0 {
		return
	}
	set, unset := 0, 0
	for _, name := range names {
		if c.Outboxes[name] == nil {
			continue
		}
		if v.d.present["outboxes."+name+".database.maxConnections"] {
			set += c.Outboxes[name].Database.MaxConnections
		} else {
			unset++
		}
	}
	switch {
	case set > limit:
		v.add("engine.maxConnections", "%d is below the %d connections the outboxes' database.maxConnections add up to; raise it, or lower theirs", limit, set)
	case unset > 0 && (limit-set)/unset < minPool:
		v.add("engine.maxConnections", "%d leaves %d connections for the %d outboxes that set no database.maxConnections, fewer than %d each; raise it to at least %d, or set their pools", limit, limit-set, unset, minPool, set+unset*minPool)
	}
}

// OutboxNames are the configuration's outboxes, in name order:
// DefaultOutbox alone for a file with a top-level database block.
func (c *Config) OutboxNames() []string {
	if len(c.Outboxes) == 0 {
		return []string{DefaultOutbox}
	}
	names := make([]string, 0, len(c.Outboxes))
	for n := range c.Outboxes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ManyOutboxes says whether the file names its outboxes (outboxes:), as
// opposed to one top-level database block.
func (c *Config) ManyOutboxes() bool { return len(c.Outboxes) > 0 }

// ForOutbox is the configuration as one outbox sees it: Database, Outbox and
// Routes are the outbox's (the outbox settings and routes of the top level
// where it has none of its own), the pool its share of
// engine.maxConnections, and Compiled.Router its routes'. Everything else
// is shared with l. For a file with a top-level database block,
// ForOutbox(DefaultOutbox) is l with OutboxName set.
func (l *Loaded) ForOutbox(name string) (*Loaded, error) {
	if !l.ManyOutboxes() {
		if name != DefaultOutbox {
			return nil, l.unknownOutbox(name)
		}
		if l.OutboxName == "" {
			v := *l
			v.OutboxName = DefaultOutbox
			return &v, nil
		}
		return l, nil
	}
	o := l.Outboxes[name]
	if o == nil {
		return nil, l.unknownOutbox(name)
	}
	cfg := *l.Config
	cfg.Database = o.Database
	if !l.poolSet(name) {
		cfg.Database.MaxConnections = l.poolShare()
	}
	if o.Outbox != nil {
		cfg.Outbox = *o.Outbox
	}
	compiled := *l.Compiled
	if o.Routes != nil {
		cfg.Routes = o.Routes
		compiled.Router = l.Compiled.Routers[name]
	}
	v := *l
	v.Config, v.Compiled, v.OutboxName = &cfg, &compiled, name
	return &v, nil
}

// poolSet says whether the outbox sets its own database.maxConnections.
func (l *Loaded) poolSet(name string) bool {
	return l.present != nil && l.present["outboxes."+name+".database.maxConnections"]
}

// poolShare is the pool of an outbox that sets none: an equal share of
// what engine.maxConnections leaves, at most defaultPool; defaultPool
// without a cap.
func (l *Loaded) poolShare() int {
	limit := l.Engine.MaxConnections
	if limit == 0 {
		return defaultPool
	}
	set, unset := 0, 0
	for name, o := range l.Outboxes {
		if l.poolSet(name) {
			set += o.Database.MaxConnections
		} else {
			unset++
		}
	}
	if unset == 0 {
		return defaultPool
	}
	return max(minPool, min(defaultPool, (limit-set)/unset))
}

// OutboxViews are the views of every outbox (ForOutbox), in name order.
func (l *Loaded) OutboxViews() []*Loaded {
	names := l.OutboxNames()
	out := make([]*Loaded, 0, len(names))
	for _, n := range names {
		v, err := l.ForOutbox(n)
		if err == nil {
			out = append(out, v)
		}
	}
	return out
}

// unknownOutbox is the error of --outbox NAME that names no outbox.
func (l *Loaded) unknownOutbox(name string) error {
	names := l.OutboxNames()
	return fmt.Errorf("--outbox: %q is not an outbox of %s; its outboxes are %s", name, l.File, strings.Join(names, ", "))
}

// SelectOutboxes resolves --outbox for a command: the named outbox, or
// every outbox when name is empty. A command that acts on one outbox only
// passes one=true: it then needs --outbox when the file has several.
func (l *Loaded) SelectOutboxes(name string, one bool) ([]*Loaded, error) {
	if name != "" {
		v, err := l.ForOutbox(name)
		if err != nil {
			return nil, err
		}
		return []*Loaded{v}, nil
	}
	names := l.OutboxNames()
	if one && len(names) > 1 {
		return nil, fmt.Errorf("--outbox: is required: %s has %d outboxes (%s) and this command acts on one; pass --outbox NAME", l.File, len(names), strings.Join(names, ", "))
	}
	return l.OutboxViews(), nil
}

// InboxOutbox is the outbox whose database holds the inbox the sources
// store into, and whose engine runs the inbox relay: inbox.outbox, or the
// only outbox; "" when the file has several and names none.
func (l *Loaded) InboxOutbox() string {
	if l.Inbox.Outbox != "" {
		return l.Inbox.Outbox
	}
	if names := l.OutboxNames(); len(names) == 1 {
		return names[0]
	}
	return ""
}

// inboxOutbox checks inbox.outbox: an outbox of the file, required with
// several outboxes when there are inbox sources.
func (v *validator) inboxOutbox(c *Config) {
	names := c.OutboxNames()
	switch {
	case c.Inbox.Outbox != "" && !slices.Contains(names, c.Inbox.Outbox):
		v.add("inbox.outbox", "%q is not an outbox of this file; its outboxes are %s", c.Inbox.Outbox, strings.Join(names, ", "))
	case c.Inbox.Outbox == "" && len(names) > 1 && len(c.Inbox.Sources) > 0:
		v.add("inbox.outbox", "is required with inbox sources and several outboxes: name the outbox whose database holds the inbox table they store into (one of %s)", strings.Join(names, ", "))
	}
}
