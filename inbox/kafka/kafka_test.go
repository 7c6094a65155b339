package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/inboxtest"

	"github.com/queuebox/queuebox/internal/testlog"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkafka"
	kafkasink "github.com/queuebox/queuebox/sinks/kafka"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// record is a record to produce: key, value and the X-Message-Id header
// ("" for none).
type record struct {
	key, id, typ string
	n            int
	value        string
}

func produce(t *testing.T, c *testkafka.Cluster, topic string, recs ...record) {
	t.Helper()
	w := &kafkago.Writer{Addr: kafkago.TCP(c.Brokers...), Topic: topic, Balancer: &kafkago.Hash{}, BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll, Transport: c.Transport()}
	defer w.Close()
	msgs := make([]kafkago.Message, len(recs))
	for i, r := range recs {
		v := r.value
		if v == "" {
			v = fmt.Sprintf(`{"n":%d}`, r.n)
		}
		m := kafkago.Message{Key: []byte(r.key), Value: []byte(v), Headers: []kafkago.Header{{Key: "type", Value: []byte(r.typ)}}}
		if r.id != "" {
			m.Headers = append(m.Headers, kafkago.Header{Key: "X-Message-Id", Value: []byte(r.id)})
		}
		msgs[i] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

func consumer(t *testing.T, d dialects.Inbox, cl *testkafka.Cluster, topic, group string, obs inbox.Observer, hook func() error) *Consumer {
	t.Helper()
	tp, _ := inbox.ParseTemplate("orders.{{ headers.type }}")
	agg, _ := inbox.ParseTemplate("{{ headers.key }}")
	m, err := inbox.NewMapping("orders", tp, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	return started(t, Config{Mapping: m, Storer: inbox.NewStorer("orders", d, obs, nil), Brokers: cl.Brokers, Topic: topic, GroupID: group,
		MaxBatch: 10, afterStore: hook, sessionTimeout: 6 * time.Second})
}

// started starts a consumer, stopped when the test ends.
func started(t *testing.T, cfg Config) *Consumer {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// committed returns the group's committed offset summed over partitions,
// and the topic's end offsets summed.
func committed(t *testing.T, cl *testkafka.Cluster, topic, group string, partitions int) (int64, int64) {
	t.Helper()
	return offsets(t, &kafkago.Client{Addr: kafkago.TCP(cl.Brokers...), Transport: cl.Transport()}, topic, group, partitions)
}

func offsets(t *testing.T, client *kafkago.Client, topic, group string, partitions int) (int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := make([]int, partitions)
	var ends []kafkago.OffsetRequest
	for i := range ps {
		ps[i] = i
		ends = append(ends, kafkago.LastOffsetOf(i))
	}
	res, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, p := range res.Topics[topic] {
		got += max(p.CommittedOffset, 0)
	}
	lo, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: ends}})
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, p := range lo.Topics[topic] {
		end += p.LastOffset
	}
	return got, end
}

// Records are stored once per message id, with the templates' topic and
// the record key as aggregate; the offsets are committed once stored.
func TestStoresOnceAndCommits(t *testing.T) {
	t.Parallel()
	cl := testkafka.New(t)
	d := testdb.Migrated(t, 10)
	topic, group := testkafka.Unique("qbt-in"), testkafka.Unique("qbt-group")
	cl.CreateTopic(t, topic, 3)
	produce(t, cl, topic,
		record{key: "o-1", id: "m1", typ: "created", n: 1},
		record{key: "o-2", id: "m2", typ: "paid", n: 2},
		record{key: "o-1", id: "m1", typ: "created", n: 1}, // the producer retried
		record{key: "o-3", typ: "created", n: 3},           // no id: topic/partition/offset
	)
	obs := &inboxtest.Counter{}
	c := consumer(t, d, cl, topic, group, obs, nil)
	inboxtest.WaitFor(t, "three rows and a duplicate", func() bool { return len(inboxtest.Rows(t, d)) == 3 && obs.Get(inbox.Duplicate) == 1 })
	inboxtest.WaitFor(t, "the offsets committed", func() bool { got, end := committed(t, cl, topic, group, 3); return got == end && end == 4 })
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	byID := map[string]inboxtest.Row{}
	for _, r := range inboxtest.Rows(t, d) {
		byID[r.MessageID] = r
	}
	if r := byID["m1"]; r.Topic != "orders.created" || r.AggregateID == nil || *r.AggregateID != "o-1" {
		t.Errorf("m1: %+v", r)
	}
	var generated []string
	for id := range byID {
		if id != "m1" && id != "m2" {
			generated = append(generated, id)
		}
	}
	if len(generated) != 1 || len(generated[0]) < len(topic)+4 || generated[0][:len(topic)+1] != topic+"/" {
		t.Errorf("the record without X-Message-Id got id %v, want topic/partition/offset", generated)
	}
}

// A member that dies between the insert and the offset commit loses
// nothing and stores nothing twice: the next member reads the batch again
// and finds duplicates.
func TestCrashBetweenInsertAndCommit(t *testing.T) {
	t.Parallel()
	cl := testkafka.New(t)
	d := testdb.Migrated(t, 10)
	topic, group := testkafka.Unique("qbt-in"), testkafka.Unique("qbt-group")
	cl.CreateTopic(t, topic, 1)
	const n = 40
	var recs []record
	for i := range n {
		recs = append(recs, record{key: fmt.Sprintf("o-%d", i%3), id: fmt.Sprintf("m%d", i), typ: "created", n: i})
	}
	produce(t, cl, topic, recs...)
	var crashed atomic.Bool
	consumer(t, d, cl, topic, group, nil, func() error {
		crashed.Store(true)
		return errors.New("crash")
	})
	inboxtest.WaitFor(t, "the first member to store a batch and die", crashed.Load)
	stored := len(inboxtest.Rows(t, d))
	if stored == 0 || stored > 10 {
		t.Fatalf("the first member stored %d rows, want one batch", stored)
	}
	obs := &inboxtest.Counter{}
	consumer(t, d, cl, topic, group, obs, nil)
	inboxtest.WaitFor(t, "every record", func() bool { return len(inboxtest.Rows(t, d)) == n })
	inboxtest.WaitFor(t, "the offsets committed", func() bool { got, end := committed(t, cl, topic, group, 1); return got == end })
	if obs.Get(inbox.Duplicate) != stored || obs.Get(inbox.Stored) != n-stored {
		t.Fatalf("the second member counted %v; want %d duplicates and %d stored", obs, stored, n-stored)
	}
	// Receive order per key is the partition's order.
	last := map[string]int{}
	for _, r := range inboxtest.Rows(t, d) {
		if l, ok := last[*r.AggregateID]; ok && r.N < l {
			t.Errorf("key %s: record %d stored after %d", *r.AggregateID, r.N, l)
		}
		last[*r.AggregateID] = r.N
	}
}

// A record that can never be stored is committed past, and the records
// behind it are stored.
func TestRefusedRecordsAreSkipped(t *testing.T) {
	t.Parallel()
	cl := testkafka.New(t)
	d := testdb.Migrated(t, 10)
	topic, group := testkafka.Unique("qbt-in"), testkafka.Unique("qbt-group")
	cl.CreateTopic(t, topic, 1)
	produce(t, cl, topic, record{key: "o", id: "bad", typ: "x", value: "not json"}, record{key: "o", id: "no-type", typ: ""},
		record{key: "o", id: "ok", typ: "created", n: 1})
	obs := &inboxtest.Counter{}
	consumer(t, d, cl, topic, group, obs, nil)
	inboxtest.WaitFor(t, "the good record", func() bool { return len(inboxtest.Rows(t, d)) == 1 && obs.Get(inbox.Rejected) == 2 })
	inboxtest.WaitFor(t, "the offsets committed past the refused records", func() bool { got, end := committed(t, cl, topic, group, 1); return got == end && end == 3 })
	if r := inboxtest.Rows(t, d); r[0].MessageID != "ok" {
		t.Fatalf("rows %+v", r)
	}
}

// The member keeps reading across a restart of the cluster.
func TestReadsAcrossARestart(t *testing.T) {
	t.Parallel()
	cl := testkafka.NewRestartable(t)
	d := testdb.Migrated(t, 10)
	topic, group := testkafka.Unique("qbt-in"), testkafka.Unique("qbt-group")
	cl.CreateTopic(t, topic, 1)
	produce(t, cl, topic, record{key: "o", id: "before", typ: "created", n: 1})
	consumer(t, d, cl, topic, group, nil, nil)
	inboxtest.WaitFor(t, "the first record", func() bool { return len(inboxtest.Rows(t, d)) == 1 })
	cl.Stop(t)
	cl.Start(t)
	produce(t, cl, topic, record{key: "o", id: "after", typ: "created", n: 2})
	inboxtest.WaitFor(t, "the record sent after the restart", func() bool { return len(inboxtest.Rows(t, d)) == 2 })
}

// A cluster that requires SASL: with the right credentials (PLAIN and both
// SCRAMs, built by the Kafka destination's code) the source joins its group
// and stores; with a wrong password it stores nothing, commits nothing and
// logs the refused login.
func TestSASL(t *testing.T) {
	t.Parallel()
	cl := testkafka.New(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "plain-user", "p1"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "p2"), kfake.Superuser("SCRAM-SHA-512", "scram512", "p3"))
	admin := cl.Fake(t)
	for _, creds := range []kafkasink.SASL{
		{Mechanism: "PLAIN", Username: "plain-user", Password: "p1"},
		{Mechanism: "SCRAM-SHA-256", Username: "scram256", Password: "p2"},
		{Mechanism: "SCRAM-SHA-512", Username: "scram512", Password: "p3"},
	} {
		t.Run(creds.Mechanism, func(t *testing.T) {
			t.Parallel()
			topic := testkafka.Unique("qbt-in-sasl")
			if err := admin.CreateTopic(topic, 1, nil); err != nil {
				t.Fatal(err)
			}
			produceAs(t, cl, creds, topic, record{key: "o-1", id: "m1", typ: "created", n: 1}, record{key: "o-2", id: "m2", typ: "paid", n: 2})

			// A wrong password: nothing stored, the refusal logged.
			wrong := creds
			wrong.Password = "wrong-password"
			bad, badLog := testdb.Migrated(t, 10), &testlog.Buffer{}
			badGroup := testkafka.Unique("qbt-group")
			c := saslConsumer(t, bad, cl, topic, badGroup, wrong, badLog)
			inboxtest.WaitFor(t, "the refused login in the log", func() bool { return strings.Contains(badLog.String(), "SASL Authentication failed") })
			if err := c.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := inboxtest.Rows(t, bad); len(r) != 0 {
				t.Errorf("with a wrong password the source stored %+v", r)
			}
			if !strings.Contains(badLog.String(), "the Kafka source met an error") {
				t.Errorf("the log does not say the source failed:\n%s", badLog.String())
			}
			if strings.Contains(badLog.String(), "wrong-password") {
				t.Errorf("the log shows the password:\n%s", badLog.String())
			}

			// The right credentials: stored and committed.
			good := testdb.Migrated(t, 10)
			group := testkafka.Unique("qbt-group")
			saslConsumer(t, good, cl, topic, group, creds, nil)
			inboxtest.WaitFor(t, "both records", func() bool { return len(inboxtest.Rows(t, good)) == 2 })
			inboxtest.WaitFor(t, "the offsets committed", func() bool {
				got, end := committedAs(t, cl, creds, topic, group)
				return got == end && end == 2
			})
			if got, _ := committedAs(t, cl, creds, topic, badGroup); got != 0 {
				t.Errorf("the member with a wrong password committed offset %d", got)
			}
		})
	}
}

func saslConsumer(t *testing.T, d dialects.Inbox, cl *testkafka.Cluster, topic, group string, creds kafkasink.SASL, logs *testlog.Buffer) *Consumer {
	t.Helper()
	return securedConsumer(t, d, cl, topic, group, creds, kafkasink.TLS{}, logs)
}

// securedConsumer starts a source with the given sasl and tls settings;
// logs, when set, receives its log.
func securedConsumer(t *testing.T, d dialects.Inbox, cl *testkafka.Cluster, topic, group string, creds kafkasink.SASL, tlsCfg kafkasink.TLS, logs *testlog.Buffer) *Consumer {
	t.Helper()
	tp, _ := inbox.ParseTemplate("orders.{{ headers.type }}")
	m, err := inbox.NewMapping("orders", tp, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	return started(t, Config{Mapping: m, Storer: inbox.NewStorer("orders", d, nil, nil), Brokers: cl.Brokers, Topic: topic, GroupID: group,
		SASL: creds, TLS: tlsCfg, Log: log, sessionTimeout: 6 * time.Second})
}

// produceAs writes records to a cluster that requires SASL.
func produceAs(t *testing.T, cl *testkafka.Cluster, creds kafkasink.SASL, topic string, recs ...record) {
	t.Helper()
	mech, err := kafkasink.Mechanism(creds)
	if err != nil {
		t.Fatal(err)
	}
	w := &kafkago.Writer{Addr: kafkago.TCP(cl.Brokers...), Topic: topic, BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll,
		Transport: &kafkago.Transport{SASL: mech}}
	defer w.Close()
	msgs := make([]kafkago.Message, len(recs))
	for i, r := range recs {
		msgs[i] = kafkago.Message{Key: []byte(r.key), Value: fmt.Appendf(nil, `{"n":%d}`, r.n),
			Headers: []kafkago.Header{{Key: "type", Value: []byte(r.typ)}, {Key: "X-Message-Id", Value: []byte(r.id)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// committedAs returns a group's committed offset and the end offset of a
// one-partition topic, on a cluster that requires SASL.
func committedAs(t *testing.T, cl *testkafka.Cluster, creds kafkasink.SASL, topic, group string) (int64, int64) {
	t.Helper()
	mech, err := kafkasink.Mechanism(creds)
	if err != nil {
		t.Fatal(err)
	}
	return offsets(t, &kafkago.Client{Addr: kafkago.TCP(cl.Brokers...), Transport: &kafkago.Transport{SASL: mech}}, topic, group, 1)
}

// within waits up to limit for cond.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopWithin stops c, which must not take more than five seconds.
func stopWithin(t *testing.T, c *Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// storesOver checks that a source with the given settings, on a secured
// cluster, stores the records produced to topic and commits their offsets.
func storesOver(t *testing.T, cl *testkafka.Cluster, topic string, creds kafkasink.SASL, tlsCfg kafkasink.TLS) {
	t.Helper()
	d := testdb.Migrated(t, 10)
	group := testkafka.Unique("qbt-group")
	securedConsumer(t, d, cl, topic, group, creds, tlsCfg, nil)
	within(t, 15*time.Second, "both records in the inbox", func() bool { return len(inboxtest.Rows(t, d)) == 2 })
	within(t, 15*time.Second, "the offsets committed", func() bool { got, end := committed(t, cl, topic, group, 1); return got == end && end == 2 })
	rows := inboxtest.Rows(t, d)
	if rows[0].MessageID != "m1" || rows[0].Topic != "orders.created" || rows[0].N != 1 ||
		rows[1].MessageID != "m2" || rows[1].Topic != "orders.paid" || rows[1].N != 2 {
		t.Errorf("stored %+v, want m1 (orders.created, n 1) then m2 (orders.paid, n 2)", rows)
	}
}

// TLS with the cluster's CA in tls.caFile: the source joins its group over
// TLS and stores. With a CA that did not sign the brokers' certificate it
// stores nothing, commits nothing and logs the refused certificate.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := testkafka.NewCA(t)
	cl := testkafka.NewSecure(t, testkafka.Security{CA: ca})
	topic := testkafka.Unique("qbt-in-tls")
	cl.CreateTopic(t, topic, 1)
	produce(t, cl, topic, record{key: "o-1", id: "m1", typ: "created", n: 1}, record{key: "o-2", id: "m2", typ: "paid", n: 2})

	t.Run("caFile", func(t *testing.T) {
		t.Parallel()
		storesOver(t, cl, topic, kafkasink.SASL{}, kafkasink.TLS{Enabled: true, CAFile: ca.File})
	})
	t.Run("wrong CA", func(t *testing.T) {
		t.Parallel()
		other := testkafka.NewCA(t)
		d, logs := testdb.Migrated(t, 10), &testlog.Buffer{}
		group := testkafka.Unique("qbt-group")
		c := securedConsumer(t, d, cl, topic, group, kafkasink.SASL{}, kafkasink.TLS{Enabled: true, CAFile: other.File}, logs)
		within(t, 15*time.Second, "the refused certificate in the log", func() bool {
			return strings.Contains(logs.String(), "certificate signed by unknown authority")
		})
		stopWithin(t, c)
		if r := inboxtest.Rows(t, d); len(r) != 0 {
			t.Errorf("with the wrong CA the source stored %+v", r)
		}
		if got, _ := committed(t, cl, topic, group, 1); got != 0 {
			t.Errorf("with the wrong CA the source committed offset %d", got)
		}
	})
}

// TLS and SASL together: a SCRAM login inside a connection verified with
// tls.caFile.
func TestTLSWithSASL(t *testing.T) {
	t.Parallel()
	ca := testkafka.NewCA(t)
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			u := testkafka.User{Mechanism: mech, Username: "inbox-user", Password: "s3cret"}
			cl := testkafka.NewSecure(t, testkafka.Security{CA: ca, Users: []testkafka.User{u}})
			topic := testkafka.Unique("qbt-in-tls-sasl")
			cl.CreateTopic(t, topic, 1)
			produce(t, cl, topic, record{key: "o-1", id: "m1", typ: "created", n: 1}, record{key: "o-2", id: "m2", typ: "paid", n: 2})
			storesOver(t, cl, topic, kafkasink.SASL{Mechanism: u.Mechanism, Username: u.Username, Password: u.Password},
				kafkasink.TLS{Enabled: true, CAFile: ca.File})
		})
	}
}

// The sasl and tls settings are refused as a Kafka destination refuses
// them, naming the key.
func TestNewRejectsBadSecurity(t *testing.T) {
	tp, _ := inbox.ParseTemplate("orders")
	m, err := inbox.NewMapping("s", tp, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := Config{Mapping: m, Storer: inbox.NewStorer("s", nil, nil, nil), Brokers: []string{"h:1"}, Topic: "t", GroupID: "g"}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.SASL = kafkasink.SASL{Mechanism: "GSSAPI"} }, "sasl.mechanism"},
		{func(c *Config) { c.TLS = kafkasink.TLS{CAFile: "x.pem"} }, "tls.enabled"},
		{func(c *Config) { c.TLS = kafkasink.TLS{Enabled: true, CAFile: filepath.Join(t.TempDir(), "none.pem")} }, "tls.caFile"},
	} {
		cfg := base
		tc.change(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", cfg, err, tc.want)
		}
	}
}
