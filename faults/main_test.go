package faults

import (
	"testing"

	"github.com/queuebox/queuebox/internal/testbin"

	"github.com/queuebox/queuebox/internal/testrabbit"
)

// TestMain stops the private RabbitMQ node (if a test started one) and
// removes the binary the tests built.
func TestMain(m *testing.M) {
	testrabbit.Main(m)
	testbin.Remove()
}
