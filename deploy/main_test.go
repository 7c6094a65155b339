package deploy

import (
	"testing"

	"github.com/queuebox/queuebox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
