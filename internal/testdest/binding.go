package testdest

import (
	"bytes"
	"context"
	"io"
	nethttp "net/http"
	"net/url"
	"strings"

	"github.com/IBM/sarama"
	kafkasarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	natsgo "github.com/nats-io/nats.go"
)

// EventMessage reads what a destination of type typ received as the CloudEvents SDK
// does: with the SDK's own binding where it has one (HTTP; Kafka; NATS in
// structured mode), and otherwise with the SDK's attribute tables under the
// binding's prefix (NATS in binary mode, which the SDK's NATS binding,
// protocol/nats/v2, does not read: it takes structured messages only;
// AMQP, whose SDK binding speaks AMQP 1.0, read here from the 0-9-1
// headers table and content_type property they map onto).
func (r Received) EventMessage(typ string) binding.Message {
	switch typ {
	case "http":
		h := nethttp.Header{}
		for _, x := range r.Headers {
			h.Add(x.Name, x.Value)
		}
		return cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(r.Body)))
	case "kafka":
		cm := &sarama.ConsumerMessage{Key: r.Key, Value: r.Body, Topic: "t"}
		for _, x := range r.Headers {
			cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(x.Name), Value: []byte(x.Value)})
		}
		return kafkasarama.NewMessageFromConsumerMessage(cm)
	case "nats":
		ct, _ := r.Get("Content-Type")
		if format.Lookup(ct) != nil {
			msg := &natsgo.Msg{Data: r.Body, Header: natsgo.Header{}}
			for _, x := range r.Headers {
				msg.Header.Add(x.Name, x.Value)
			}
			return cenats.NewMessage(msg)
		}
		return newPrefixed("ce-", r.Headers, "", r.Body, url.PathUnescape)
	case "rabbitmq":
		return newPrefixed("cloudEvents_", r.Headers, r.ContentType, r.Body, nil)
	}
	panic("no binding for " + typ)
}

// prefixed is a binding.Message over headers whose names carry the
// attributes under a prefix, with the data content type in a place of the
// protocol's own (contentType, "" for none).
type prefixed struct {
	prefix      string
	headers     map[string]string // by lower-case name
	contentType string
	body        []byte
	decode      func(string) (string, error)
	format      format.Format
	version     spec.Version
}

func newPrefixed(prefix string, hs []Header, contentType string, body []byte, decode func(string) (string, error)) *prefixed {
	m := &prefixed{prefix: strings.ToLower(prefix), headers: map[string]string{}, contentType: contentType, body: body, decode: decode}
	if m.decode == nil {
		m.decode = func(s string) (string, error) { return s, nil }
	}
	for _, h := range hs {
		m.headers[strings.ToLower(h.Name)] = h.Value
	}
	if m.format = format.Lookup(contentType); m.format == nil {
		m.version = spec.WithPrefix(prefix).Version(m.headers[m.prefix+"specversion"])
	}
	return m
}

func (m *prefixed) ReadEncoding() binding.Encoding {
	switch {
	case m.format != nil:
		return binding.EncodingStructured
	case m.version != nil:
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *prefixed) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.body))
}

func (m *prefixed) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	for k, v := range m.headers {
		if !strings.HasPrefix(k, m.prefix) {
			continue
		}
		v, err := m.decode(v)
		if err != nil {
			return err
		}
		if a := m.version.Attribute(k); a != nil {
			err = w.SetAttribute(a, v)
		} else {
			err = w.SetExtension(strings.TrimPrefix(k, m.prefix), v)
		}
		if err != nil {
			return err
		}
	}
	if m.contentType != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.contentType); err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.body))
}

func (m *prefixed) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	a := m.version.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if v, ok := m.headers[strings.ToLower(a.PrefixedName())]; ok {
		d, _ := m.decode(v)
		return a, d
	}
	return a, nil
}

func (m *prefixed) GetExtension(name string) any {
	if v, ok := m.headers[m.prefix+name]; ok {
		d, _ := m.decode(v)
		return d
	}
	return nil
}

func (m *prefixed) Finish(error) error { return nil }
