package cloudevents

import (
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/queuebox/queuebox/internal/testdest"
)

// bindingMessage reads what a destination received as the CloudEvents SDK
// does (testdest.Received.EventMessage).
func bindingMessage(typ string, r testdest.Received) binding.Message {
	return r.EventMessage(typ)
}
