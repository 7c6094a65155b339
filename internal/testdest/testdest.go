// Package testdest gives the tests of sink decorators (CloudEvents,
// tracing) a real destination of each type: the real sink over a real
// server (an HTTP receiver, RabbitMQ, an in-process NATS server with
// JetStream, kfake), and what reached that server, read the way a consumer
// reads it: headers in the order the protocol keeps them, the content type
// property of AMQP, the record key of Kafka.
package testdest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
	kafkasink "github.com/queuebox/queuebox/sinks/kafka"
	natssink "github.com/queuebox/queuebox/sinks/nats"
	rabbitsink "github.com/queuebox/queuebox/sinks/rabbitmq"
)

// Types are the destination types that send messages.
var Types = []string{"http", "rabbitmq", "kafka", "nats"}

// Header is one header as it arrived.
type Header struct{ Name, Value string }

// Received is one message as it reached the server.
type Received struct {
	// Headers in the order the protocol keeps them (HTTP and NATS keep
	// none: sorted by name there).
	Headers []Header
	// ContentType is the AMQP content_type property; "" elsewhere.
	ContentType string
	// Key is the Kafka record key; nil elsewhere or for none.
	Key  []byte
	Body []byte
}

// Get returns the last header whose name equals name in any case.
func (r Received) Get(name string) (string, bool) {
	v, ok := "", false
	for _, h := range r.Headers {
		if strings.EqualFold(h.Name, name) {
			v, ok = h.Value, true
		}
	}
	return v, ok
}

// Map returns the headers by name (the last of a name wins).
func (r Received) Map() map[string]string {
	out := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		out[h.Name] = h.Value
	}
	return out
}

// Destination is a real sink and what reached its server.
type Destination struct {
	Type string
	Sink sinks.Sink
	// Address is the source of the sink's address template.
	Address string
	// Settings are the keys of a destination of QueueBox's configuration
	// that delivers where Sink does (type, url, exchange, topic, ...), for
	// tests of the configuration's path to the sinks.
	Settings map[string]any
	read     func() ([]Received, error)
}

// Options change what Open builds.
type Options struct {
	// SigningSecret signs HTTP deliveries (Standard Webhooks).
	SigningSecret []byte
}

// Open starts a server of destination type typ and a sink that delivers
// every message to it; both stop when the test ends.
func Open(t *testing.T, typ string, o Options) *Destination {
	t.Helper()
	d := &Destination{Type: typ}
	var err error
	switch typ {
	case "http":
		recv := testrecv.New(t, nil)
		d.Address = recv.URL + "/events/{{ topic }}"
		d.Sink, err = httpsink.New(httpsink.Config{URL: tpl(t, d.Address), Method: "POST", Timeout: 10 * time.Second, SigningSecret: o.SigningSecret})
		d.Settings = map[string]any{"url": d.Address}
		d.read = func() ([]Received, error) {
			var out []Received
			for _, q := range recv.Requests() {
				out = append(out, Received{Headers: sorted(q.Header), Body: q.Body})
			}
			return out, nil
		}
	case "rabbitmq":
		q := testrabbit.NewQueue(t, testrabbit.URL(t), "#")
		d.Address = q.Exchange
		d.Sink, err = rabbitsink.New(rabbitsink.Config{URL: q.URL, Exchange: tpl(t, q.Exchange), RoutingKey: tpl(t, "{{ topic }}"), Mandatory: true, Timeout: 10 * time.Second})
		d.Settings = map[string]any{"url": q.URL, "exchange": q.Exchange, "routingKey": "{{ topic }}", "mandatory": true}
		d.read = func() ([]Received, error) {
			var out []Received
			for _, m := range q.Get() {
				r := Received{ContentType: m.ContentType, Body: m.Body}
				names := make([]string, 0, len(m.Headers))
				for k := range m.Headers {
					names = append(names, k)
				}
				sort.Strings(names)
				for _, k := range names {
					r.Headers = append(r.Headers, Header{k, fmt.Sprint(m.Headers[k])})
				}
				out = append(out, r)
			}
			return out, nil
		}
	case "kafka":
		c := testkafka.New(t)
		topic := testkafka.Unique("qbt")
		c.CreateTopic(t, topic, 1)
		d.Address = topic
		d.Sink, err = kafkasink.New(kafkasink.Config{Brokers: c.Brokers, Topic: tpl(t, topic), Timeout: 10 * time.Second})
		d.Settings = map[string]any{"brokers": c.Brokers, "topic": topic}
		d.read = kafkaReader(c, topic)
	case "nats":
		srv := testnats.Start(t)
		subject := testnats.Unique("qbt")
		st := srv.NewStream(t, subject, subject+".>")
		d.Address = subject + ".{{ topic }}"
		d.Sink, err = natssink.New(natssink.Config{URL: srv.URL, Subject: tpl(t, d.Address), JetStream: true, Timeout: 10 * time.Second})
		d.Settings = map[string]any{"url": srv.URL, "subject": d.Address, "jetstream": true}
		d.read = func() ([]Received, error) {
			var out []Received
			for _, m := range st.Messages() {
				r := Received{Body: m.Data}
				for k, vs := range m.Header {
					for _, v := range vs {
						r.Headers = append(r.Headers, Header{k, v})
					}
				}
				sort.SliceStable(r.Headers, func(i, j int) bool { return r.Headers[i].Name < r.Headers[j].Name })
				out = append(out, r)
			}
			return out, nil
		}
	default:
		t.Fatalf("testdest: no destination of type %q", typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Settings["type"] = typ
	t.Cleanup(func() { _ = d.Sink.Close() })
	return d
}

// Wait returns the first n messages that reached the server, waiting for
// them (testkit.Wait at most).
func (d *Destination) Wait(t *testing.T, n int) []Received {
	t.Helper()
	var got []Received
	testkit.Eventually(t, fmt.Sprintf("%d messages at the %s server", n, d.Type), 0, func() error {
		var err error
		if got, err = d.read(); err != nil {
			return err
		}
		if len(got) < n {
			return fmt.Errorf("%d arrived", len(got))
		}
		return nil
	})
	return got[:n]
}

// Publish publishes msgs and fails the test when any is not delivered.
func (d *Destination) Publish(t *testing.T, msgs ...sinks.Message) {
	t.Helper()
	PublishThrough(t, d.Sink, msgs...)
}

// PublishThrough publishes msgs with s and fails the test when any is not
// delivered.
func PublishThrough(t *testing.T, s sinks.Sink, msgs ...sinks.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Wait)
	defer cancel()
	for i, err := range s.Publish(ctx, msgs) {
		if err != nil {
			t.Fatalf("message %d (%s) was not delivered: %v", i, msgs[i].ID, err)
		}
	}
}

func tpl(t *testing.T, s string) *routing.Template {
	t.Helper()
	p, err := routing.ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sorted(h map[string][]string) []Header {
	var out []Header
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, Header{k, v})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// kafkaReader reads the topic's one partition from the start, keeping
// each record's headers in their order (testkafka.Reader keeps them by
// name, which loses the order of two headers that differ in case only).
func kafkaReader(c *testkafka.Cluster, topic string) func() ([]Received, error) {
	var got []Received
	var next int64
	return func() ([]Received, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl := &kafkago.Client{Addr: kafkago.TCP(c.Brokers...), Timeout: 5 * time.Second, Transport: c.Transport()}
		res, err := cl.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: 0, Offset: next, MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 10 * time.Millisecond})
		if err != nil {
			return got, err
		}
		if res.Error != nil {
			return got, res.Error
		}
		for {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			if rec.Offset < next {
				continue
			}
			r := Received{}
			if rec.Key != nil {
				r.Key, _ = io.ReadAll(rec.Key)
			}
			if rec.Value != nil {
				r.Body, _ = io.ReadAll(rec.Value)
			}
			for _, h := range rec.Headers {
				r.Headers = append(r.Headers, Header{h.Key, string(h.Value)})
			}
			got = append(got, r)
			next = rec.Offset + 1
		}
	}
}
