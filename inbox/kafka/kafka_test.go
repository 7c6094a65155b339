package kafka

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/sourcetest"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	kafkasink "github.com/queuebox/queuebox/sinks/kafka"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The Kafka source passes the sources' conformance suite: it refuses a
// record by committing past it, its templates read the record key as
// {{ headers.key }} (the aggregate id), and a key's records keep their
// partition's order. kfake cannot close a member's connections; the suite
// restarts it instead, keeping its data.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Harness{
		Features: sourcetest.Features{Refusal: sourcetest.SkippedPast, HeaderNUL: true, BrokerOrder: true, Restart: true},
		Open: func(t *testing.T, faults bool) *sourcetest.Target {
			cl := testkafka.NewFor(t, faults)
			topic, group := testkafka.Unique("qbt-in"), testkafka.Unique("qbt-group")
			const partitions = 3
			cl.CreateTopic(t, topic, partitions)
			tg := &sourcetest.Target{Inbox: testdb.Migrated(t, 10), MaxBatch: 10, Stop: cl.Stop, Start: cl.Start,
				GeneratedID: regexp.MustCompile("^" + regexp.QuoteMeta(topic) + `/\d+/\d+$`)}
			tg.Send = func(t *testing.T, msgs ...sourcetest.Message) { produce(t, cl.Brokers, cl.Transport(), topic, msgs...) }
			tg.Consumer = func(t *testing.T, o sourcetest.Options) (inbox.Consumer, error) {
				return New(Config{Broker: o.Broker(t, tg, "orders", "type", "key"),
					Brokers: cl.Brokers, Topic: topic, GroupID: group, sessionTimeout: 6 * time.Second})
			}
			tg.Left = func(*testing.T) (int, error) {
				got, end, err := offsets(&kafkago.Client{Addr: kafkago.TCP(cl.Brokers...), Transport: cl.Transport()}, topic, group, partitions)
				return int(end - got), err
			}
			reader := cl.NewReader(topic, partitions)
			tg.BrokerOrder = func(*testing.T) []string {
				var ids []string
				for _, r := range reader.Poll() {
					ids = append(ids, r.Headers["X-Message-Id"])
				}
				return ids
			}
			return tg
		},
	})
}

// produce writes msgs to topic, each with its aggregate as the record key
// and its type in the header "type". It reports a failure with t.Error: the
// suite may call it from a goroutine of its own.
func produce(t *testing.T, brokers []string, transport kafkago.RoundTripper, topic string, msgs ...sourcetest.Message) {
	t.Helper()
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: topic, Balancer: &kafkago.Hash{}, BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll, Transport: transport}
	defer w.Close()
	recs := make([]kafkago.Message, len(msgs))
	for i, m := range msgs {
		recs[i] = kafkago.Message{Key: []byte(m.Aggregate), Value: m.Body}
		for name, v := range m.Headers {
			recs[i].Headers = append(recs[i].Headers, kafkago.Header{Key: name, Value: []byte(v)})
		}
		if m.Type != "" {
			recs[i].Headers = append(recs[i].Headers, kafkago.Header{Key: "type", Value: []byte(m.Type)})
		}
		if m.ID != "" {
			recs[i].Headers = append(recs[i].Headers, kafkago.Header{Key: "X-Message-Id", Value: []byte(m.ID)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, recs...); err != nil {
		t.Errorf("produce to %s: %v", topic, err)
	}
}

// committed returns the group's committed offset summed over partitions,
// and the topic's end offsets summed.
func committed(t *testing.T, cl *testkafka.Cluster, topic, group string, partitions int) (int64, int64) {
	t.Helper()
	return mustOffsets(t, &kafkago.Client{Addr: kafkago.TCP(cl.Brokers...), Transport: cl.Transport()}, topic, group, partitions)
}

func mustOffsets(t *testing.T, client *kafkago.Client, topic, group string, partitions int) (int64, int64) {
	t.Helper()
	got, end, err := offsets(client, topic, group, partitions)
	if err != nil {
		t.Fatal(err)
	}
	return got, end
}

// offsets returns what the group committed and the end offsets, each
// summed over the topic's partitions.
func offsets(client *kafkago.Client, topic, group string, partitions int) (got, end int64, err error) {
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
		return 0, 0, err
	}
	for _, p := range res.Topics[topic] {
		got += max(p.CommittedOffset, 0)
	}
	lo, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: ends}})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range lo.Topics[topic] {
		end += p.LastOffset
	}
	return got, end, nil
}

// twoRecords are what the tests of SASL and TLS produce and expect stored.
var twoRecords = []sourcetest.Message{
	{ID: "m1", Type: "created", Aggregate: "o-1", Body: sourcetest.Body(1)},
	{ID: "m2", Type: "paid", Aggregate: "o-2", Body: sourcetest.Body(2)},
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
			produce(t, cl.Brokers, saslTransport(t, creds), topic, twoRecords...)

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

func saslConsumer(t *testing.T, d dialects.Inbox, cl *testkafka.Cluster, topic, group string, creds kafkasink.SASL, logs *testlog.Buffer) inbox.Consumer {
	t.Helper()
	return securedConsumer(t, d, cl, topic, group, creds, kafkasink.TLS{}, logs)
}

// securedConsumer starts a source with the given sasl and tls settings;
// logs, when set, receives its log.
func securedConsumer(t *testing.T, d dialects.Inbox, cl *testkafka.Cluster, topic, group string, creds kafkasink.SASL, tlsCfg kafkasink.TLS, logs *testlog.Buffer) inbox.Consumer {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	c, err := New(Config{Broker: inbox.Broker{Mapping: sourcetest.Mapping(t, "orders", "type", "key"), Storer: inbox.NewStorer("orders", d, nil, nil), Log: log},
		Brokers: cl.Brokers, Topic: topic, GroupID: group, SASL: creds, TLS: tlsCfg, sessionTimeout: 6 * time.Second})
	return sourcetest.Started(t, c, err)
}

// saslTransport connects to a cluster that requires SASL.
func saslTransport(t *testing.T, creds kafkasink.SASL) *kafkago.Transport {
	t.Helper()
	mech, err := kafkasink.Mechanism(creds)
	if err != nil {
		t.Fatal(err)
	}
	return &kafkago.Transport{SASL: mech}
}

// committedAs returns a group's committed offset and the end offset of a
// one-partition topic, on a cluster that requires SASL.
func committedAs(t *testing.T, cl *testkafka.Cluster, creds kafkasink.SASL, topic, group string) (int64, int64) {
	t.Helper()
	return mustOffsets(t, &kafkago.Client{Addr: kafkago.TCP(cl.Brokers...), Transport: saslTransport(t, creds)}, topic, group, 1)
}

// within waits up to limit for cond.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, "waiting for "+what, limit, testkit.True(cond))
}

// stopWithin stops c, which must not take more than five seconds.
func stopWithin(t *testing.T, c inbox.Consumer) {
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
	if rows[0].MessageID != "m1" || rows[0].Topic != "in.created" || rows[0].N != 1 ||
		rows[1].MessageID != "m2" || rows[1].Topic != "in.paid" || rows[1].N != 2 {
		t.Errorf("stored %+v, want m1 (in.created, n 1) then m2 (in.paid, n 2)", rows)
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
	produce(t, cl.Brokers, cl.Transport(), topic, twoRecords...)

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
			produce(t, cl.Brokers, cl.Transport(), topic, twoRecords...)
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
	base := Config{Broker: inbox.Broker{Mapping: m, Storer: inbox.NewStorer("s", nil, nil, nil)}, Brokers: []string{"h:1"}, Topic: "t", GroupID: "g"}
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
