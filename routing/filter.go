package routing

import (
	"encoding/json"
	"fmt"

	"github.com/itchyny/gojq"
)

// Filter is a compiled jq predicate: a route with one matches a row only
// when the program's first output is true. It reads the payload and the
// transforms' variables (TransformVariables).
type Filter struct {
	src  string
	code *gojq.Code
}

// CompileFilter parses and compiles a jq predicate once.
func CompileFilter(src string) (*Filter, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("the jq filter %q does not parse: %v", src, err)
	}
	code, err := gojq.Compile(q, gojq.WithVariables(TransformVariables))
	if err != nil {
		return nil, fmt.Errorf("the jq filter %q does not compile: %v", src, err)
	}
	return &Filter{src: src, code: code}, nil
}

// String is the filter's source.
func (f *Filter) String() string { return f.src }

// FilterError is a filter that failed on a row: the row cannot be routed.
type FilterError struct {
	Route string
	Err   error
}

func (e *FilterError) Error() string { return fmt.Sprintf("route %q: %v", e.Route, e.Err) }
func (e *FilterError) Unwrap() error { return e.Err }

// Accepts runs the filter on a payload. Its first output decides: true
// accepts, false or null refuses; any other value, no output, or an error
// is an error.
func (f *Filter) Accepts(payload []byte, v Vars) (bool, error) {
	in, err := decodePayload(payload)
	if err != nil {
		return false, err
	}
	return f.accepts(in, v.bind())
}

// decodePayload reads a payload once for the filters that test it.
func decodePayload(payload []byte) (any, error) {
	var in any
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, fmt.Errorf("filter: the payload is not JSON: %v", err)
	}
	return in, nil
}

// accepts runs the filter on a decoded payload with its variables bound
// (Vars.bind). jq does not change its input, so one decoded payload serves
// every filter of a row.
func (f *Filter) accepts(in any, vars []any) (bool, error) {
	out, ok := f.code.Run(in, vars...).Next()
	if !ok {
		// select(...) yields nothing when it refuses, which is not false.
		return false, fmt.Errorf("filter %q produced no value; a filter must yield true or false: write the test itself (.type == \"order\"), not select(...)", f.src)
	}
	switch x := out.(type) {
	case error:
		return false, fmt.Errorf("filter %q failed: %v", f.src, x)
	case bool:
		return x, nil
	case nil:
		return false, nil
	}
	b, _ := json.Marshal(out)
	return false, fmt.Errorf("filter %q produced %s, not true or false; end it with a test such as .amount > 100 or has(\"refund\")", f.src, cut(string(b), 80))
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
