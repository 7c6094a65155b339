package inbox

import (
	"net/http"

	"github.com/queuebox/queuebox/sinks/cloudevents"
)

// httpReceived reads a request as the inbox sees it. A CloudEvent, in
// either mode (sinks/cloudevents.FromHTTP), gives its id as the message
// id, its data as the body, its subject (else partitionkey) as the
// aggregate id where the source has no aggregateId template, and its
// attributes as Ce- headers, in binary mode's spelling whichever mode it
// came in, in place of the request's headers of the same names; the
// templates read those. Any other request is a plain message. A CloudEvent
// the inbox cannot store is a *Rejection.
func httpReceived(h http.Header, body []byte) (Received, error) {
	ce, ok, err := cloudevents.FromHTTP(h, body)
	if err != nil {
		return Received{}, reject("%v", err)
	}
	if !ok {
		return Received{MessageID: messageID(h), Body: body, Headers: StoredHeaders(h),
			Lookup: func(n string) (string, bool) { return headerValue(h, n) }}, nil
	}
	headers := StoredHeaders(h)
	for k := range headers {
		if _, replaced := ce.Headers[k]; replaced || isCloudEventHeader(k) {
			delete(headers, k)
		}
	}
	for k, v := range ce.Headers {
		headers[k] = v
	}
	return Received{MessageID: ce.ID, Body: ce.Data, Headers: headers, AggregateID: ce.AggregateID}, nil
}

// isCloudEventHeader reports whether a stored (canonical) header name is a
// CloudEvents attribute of the HTTP binding: the event's own attributes
// replace them all.
func isCloudEventHeader(name string) bool {
	return len(name) > 3 && name[:3] == "Ce-"
}
