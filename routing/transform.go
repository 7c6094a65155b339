package routing

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/itchyny/gojq"
)

// TransformVariables are the variables a transform can read, in the order
// Run binds them.
var TransformVariables = []string{"$attempt", "$id", "$topic", "$key", "$aggregateType", "$sequence", "$createdAt", "$headers"}

// Transform is a compiled jq program.
type Transform struct {
	src  string
	code *gojq.Code
}

// CompileTransform parses and compiles a jq program once.
func CompileTransform(src string) (*Transform, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("the jq program %q does not parse: %v", src, err)
	}
	code, err := gojq.Compile(q, gojq.WithVariables(TransformVariables))
	if err != nil {
		return nil, fmt.Errorf("the jq program %q does not compile: %v", src, err)
	}
	return &Transform{src: src, code: code}, nil
}

// Vars are the values bound to the transform's variables.
type Vars struct {
	Attempt       int
	ID            string
	Topic         string
	Key           *string
	AggregateType *string
	Sequence      int64
	CreatedAt     string
	Headers       map[string]string
}

// Run runs the program on a payload and returns the single JSON output. No
// output, more than one, or an error fails the delivery.
func (t *Transform) Run(payload []byte, v Vars) ([]byte, error) {
	var in any
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, fmt.Errorf("transform: the payload is not JSON: %v", err)
	}
	iter := t.code.Run(in, v.bind()...)
	out, ok := iter.Next()
	if !ok {
		return nil, fmt.Errorf("transform %q produced no value", t.src)
	}
	if err, isErr := out.(error); isErr {
		var halt *gojq.HaltError
		if errors.As(err, &halt) && halt.Value() == nil {
			return nil, fmt.Errorf("transform %q halted without a value", t.src)
		}
		return nil, fmt.Errorf("transform %q failed: %v", t.src, err)
	}
	if extra, more := iter.Next(); more {
		if _, isErr := extra.(error); !isErr {
			return nil, fmt.Errorf("transform %q produced more than one value; wrap it in [ ... ] to send an array", t.src)
		}
	}
	return json.Marshal(out)
}

// bind returns the variables' values in the order of TransformVariables.
func (v Vars) bind() []any {
	headers := make(map[string]any, len(v.Headers))
	for k, s := range v.Headers {
		headers[k] = s
	}
	var key, agg any
	if v.Key != nil {
		key = *v.Key
	}
	if v.AggregateType != nil {
		agg = *v.AggregateType
	}
	return []any{v.Attempt, v.ID, v.Topic, key, agg, int(v.Sequence), v.CreatedAt, headers}
}
