package cloudevents

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	nethttp "net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
)

// Incoming is a CloudEvent that an HTTP inbox source received, as the
// inbox stores it.
type Incoming struct {
	// ID is the event's id: the inbox's message id, which deduplicates.
	ID string
	// AggregateID is the event's subject, else its partitionkey; "" when
	// it has neither.
	AggregateID string
	// Data is the event's data: the inbox row's payload.
	Data []byte
	// Headers are the event's attributes as binary mode's HTTP headers
	// (Ce-Type, Ce-Source, Ce-Subject, ..., and Content-Type for
	// datacontenttype), in both modes, so that the source's templates read
	// {{ headers.Ce-Type }} whichever mode the sender chose. They replace the
	// request's headers of the same names.
	Headers map[string]string
}

// FromHTTP reads the CloudEvent of an HTTP request: structured when its
// Content-Type is application/cloudevents+json, binary when it has a
// ce-specversion header. ok is false for a request that is neither, which
// the inbox takes as a plain message. An error names what makes the event
// one the inbox cannot store.
func FromHTTP(h nethttp.Header, body []byte) (in Incoming, ok bool, err error) {
	if h.Get("Ce-Specversion") != "" {
		if h, err = percentDecoded(h); err != nil {
			return in, true, err
		}
	}
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	switch msg.ReadEncoding() {
	case binding.EncodingUnknown:
		if ct := h.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents") {
			return in, true, fmt.Errorf("the Content-Type %q is a CloudEvents format the inbox does not read; send application/cloudevents+json (structured) or the ce- headers (binary)", ct)
		}
		return in, false, nil
	case binding.EncodingBatch:
		return in, true, errors.New("the body is a batch of CloudEvents (application/cloudevents-batch+json); send one event per request")
	}
	e, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return in, true, fmt.Errorf("the CloudEvent cannot be read: %v", err)
	}
	if err := e.Validate(); err != nil {
		return in, true, fmt.Errorf("the CloudEvent is not valid: %v", err)
	}
	if ct := e.DataContentType(); ct != "" && !isJSON(ct) {
		return in, true, fmt.Errorf("the CloudEvent's datacontenttype is %q; the inbox stores JSON data (application/json)", ct)
	}
	if e.DataBase64 {
		return in, true, errors.New("the CloudEvent's data is base64 (data_base64); the inbox stores JSON data: send it as data")
	}
	in = Incoming{ID: e.ID(), AggregateID: e.Subject(), Data: e.Data(), Headers: map[string]string{}}
	if in.AggregateID == "" {
		if pk, ok := e.Extensions()["partitionkey"]; ok {
			in.AggregateID, _ = types.ToString(pk)
		}
	}
	header := func(name, value string) {
		in.Headers[textproto.CanonicalMIMEHeaderKey("ce-"+name)] = value
	}
	header("specversion", e.SpecVersion())
	header("id", e.ID())
	header("source", e.Source())
	header("type", e.Type())
	if s := e.Subject(); s != "" {
		header("subject", s)
	}
	if !e.Time().IsZero() {
		header("time", types.Timestamp{Time: e.Time()}.String())
	}
	if s := e.DataSchema(); s != "" {
		header("dataschema", s)
	}
	for name, v := range e.Extensions() {
		if s, err := types.Format(v); err == nil {
			header(name, s)
		}
	}
	if ct := e.DataContentType(); ct != "" {
		in.Headers["Content-Type"] = ct
	} else {
		in.Headers["Content-Type"] = DataContentType
	}
	return in, true, nil
}

// percentDecoded returns h with the values of its ce- headers decoded as
// the HTTP binding requires of a receiver: one round of percent-decoding,
// which must give UTF-8. A value that is no percent-encoding at all ("100%")
// is read as it came: senders built on the Go or Java SDK, and QueueBox's
// own HTTP destinations, send values as they are. (The SDK reads the
// values as they are.)
func percentDecoded(h nethttp.Header) (nethttp.Header, error) {
	out := make(nethttp.Header, len(h))
	for k, vs := range h {
		if !strings.HasPrefix(k, "Ce-") {
			out[k] = vs
			continue
		}
		dec := make([]string, len(vs))
		for i, v := range vs {
			d, err := url.PathUnescape(v)
			if err != nil {
				d = v // not encoded: sent as it is
			}
			if !utf8.ValidString(d) {
				return nil, fmt.Errorf("the header %s: %q is not percent-encoded UTF-8 text, as the CloudEvents HTTP binding requires", k, v)
			}
			dec[i] = d
		}
		out[k] = dec
	}
	return out, nil
}

// isJSON reports whether a media type is JSON: application/json or a
// +json type.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}
