package bootstrap

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// A zero the user wrote (0, 0s, "", false) is honoured, or refused with a
// reason under its key: never replaced by a default behind their back. The
// test writes every scalar key of the configuration as its zero, one at a
// time, in a file that is valid otherwise: every destination type's keys,
// every inbox source type's, a route's, and every section's. The file must
// then either be refused at that key (or at the block that needs it), or
// load with the key still zero.
func TestExplicitZerosAreHonouredOrRefused(t *testing.T) {
	destinations := map[string]map[string]any{
		"http":     {"type": "http", "url": "http://hooks.example.com/x"},
		"rabbitmq": {"type": "rabbitmq", "url": "amqp://localhost/", "exchange": "x"},
		"kafka":    {"type": "kafka", "brokers": []string{"k:9092"}, "topic": "t"},
		"nats":     {"type": "nats", "url": "nats://localhost:4222", "subject": "s"},
		"null":     {"type": "null"},
	}
	sources := map[string]map[string]any{
		"http":     {"type": "http", "topic": "t"},
		"rabbitmq": {"type": "rabbitmq", "topic": "t", "url": "amqp://localhost/", "queue": "q"},
		"kafka":    {"type": "kafka", "topic": "t", "brokers": []string{"k:9092"}, "kafkaTopic": "k", "groupId": "g"},
		"nats":     {"type": "nats", "topic": "t", "url": "nats://localhost:4222", "stream": "s", "durable": "d"},
	}
	base := func(dest, source map[string]any) map[string]any {
		doc := map[string]any{
			"database":     map[string]any{"url": "postgres://localhost/app"},
			"destinations": map[string]any{"d": clone(dest)},
			"routes":       []any{map[string]any{"topicPattern": "#", "destination": "d"}},
		}
		if source != nil {
			doc["inbox"] = map[string]any{"sources": map[string]any{"s": clone(source)}}
		}
		return doc
	}
	tried := 0
	check := func(t *testing.T, doc map[string]any, path []string, typ reflect.Type) {
		t.Helper()
		set(doc, path, zeroOf(typ))
		key := strings.Join(path, ".")
		key = strings.Replace(key, "routes.0.", "routes[0].", 1)
		file, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		tried++
		l, err := Parse("q.yaml", file, env(nil))
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("%s: %v", key, err)
				return
			}
			for _, p := range ce.Problems {
				// Under the key, or the block that needs it (a RabbitMQ
				// destination needs exchange or exchangeFrom).
				if p.Key == key || p.Key == strings.Join(path[:len(path)-1], ".") {
					if strings.TrimSpace(p.Reason) == "" {
						t.Errorf("%s is refused without a reason", key)
					}
					return
				}
			}
			t.Errorf("%s written as its zero: refused, but not under its key:\n%v\n%s", key, err, file)
			return
		}
		if v, ok := valueAt(reflect.ValueOf(l.Config).Elem(), path); !ok || !v.IsZero() {
			t.Errorf("%s written as its zero loads as %v: a default replaced what the file says", key, v)
		}
	}
	cfgType := reflect.TypeOf(Config{})
	for _, f := range fields(cfgType) {
		switch f.name {
		case "destinations", "routes", "inbox", "outboxes":
			continue
		}
		for _, leaf := range leaves(f.typ, []string{f.name}, "") {
			check(t, base(destinations["http"], nil), leaf.path, leaf.typ)
		}
	}
	for _, leaf := range leaves(reflect.TypeOf(InboxRelayConfig{}), []string{"inbox", "relay"}, "") {
		check(t, base(destinations["http"], nil), leaf.path, leaf.typ)
	}
	for _, leaf := range leaves(reflect.TypeOf(RouteConfig{}), []string{"routes", "0"}, "") {
		if leaf.path[2] != "destination" && leaf.path[2] != "topicPattern" {
			check(t, base(destinations["http"], nil), leaf.path, leaf.typ)
		}
	}
	for typ, dest := range destinations {
		for _, leaf := range leaves(reflect.TypeOf(DestinationConfig{}), []string{"destinations", "d"}, typ) {
			if leaf.path[2] != "type" {
				check(t, base(dest, nil), leaf.path, leaf.typ)
			}
		}
	}
	for typ, src := range sources {
		for _, leaf := range leaves(reflect.TypeOf(InboxSourceConfig{}), []string{"inbox", "sources", "s"}, typ) {
			if leaf.path[3] != "type" {
				check(t, base(destinations["http"], src), leaf.path, leaf.typ)
			}
		}
	}
	// An outbox of outboxes: its database block and its outbox block.
	many := func() map[string]any {
		doc := base(destinations["http"], nil)
		delete(doc, "database")
		doc["outboxes"] = map[string]any{"a": map[string]any{"database": map[string]any{"url": "postgres://localhost/app"}, "outbox": map[string]any{}}}
		return doc
	}
	for _, leaf := range leaves(reflect.TypeOf(OutboxEntryConfig{}), []string{"outboxes", "a"}, "") {
		check(t, many(), leaf.path, leaf.typ)
	}
	if tried < 140 {
		t.Fatalf("only %d keys written as zeros: the walk missed some", tried)
	}
}

type field struct {
	name string
	typ  reflect.Type
	tag  reflect.StructTag
}

func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" || name == "-" || f.Tag.Get("retired") != "" {
			continue
		}
		out = append(out, field{name, f.Type, f.Tag})
	}
	return out
}

type leaf struct {
	path []string
	typ  reflect.Type
}

// leaves lists the scalar keys under t (maps and lists aside), keeping
// those of destination or source type kind where a key says which types it
// belongs to ("" keeps them all).
func leaves(t reflect.Type, prefix []string, kind string) []leaf {
	var out []leaf
	for _, f := range fields(t) {
		if kinds, ok := f.tag.Lookup("kinds"); ok && kind != "" && !strings.Contains(","+kinds+",", ","+kind+",") {
			continue
		}
		path := append(append([]string{}, prefix...), f.name)
		ft := f.typ
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == reflect.TypeOf(Duration(0)):
			out = append(out, leaf{path, ft})
		case ft.Kind() == reflect.Struct:
			out = append(out, leaves(ft, path, kind)...)
		case ft.Kind() == reflect.Map, ft.Kind() == reflect.Slice:
		default:
			out = append(out, leaf{path, ft})
		}
	}
	return out
}

// zeroOf is the zero of a key's type as a file writes it.
func zeroOf(t reflect.Type) any {
	if t == reflect.TypeOf(Duration(0)) {
		return "0s"
	}
	switch t.Kind() {
	case reflect.String:
		return ""
	case reflect.Bool:
		return false
	case reflect.Float64:
		return 0.0
	}
	return 0
}

func set(doc map[string]any, path []string, v any) {
	var cur any = doc
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = v
				return
			}
			if c[p] == nil {
				c[p] = map[string]any{}
			}
			cur = c[p]
		case []any:
			cur = c[0]
		}
	}
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// valueAt finds the value of a key path in the loaded configuration.
func valueAt(v reflect.Value, path []string) (reflect.Value, bool) {
	for _, p := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Struct:
			found := false
			for i := range v.NumField() {
				if strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0] == p {
					v, found = v.Field(i), true
					break
				}
			}
			if !found {
				return v, false
			}
		case reflect.Map:
			v = v.MapIndex(reflect.ValueOf(p))
		case reflect.Slice:
			v = v.Index(0)
		default:
			return v, false
		}
	}
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	return v, true
}
