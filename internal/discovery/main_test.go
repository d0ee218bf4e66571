package discovery_test

import (
	"os"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// Its parallel tests mostly wait on buses and processes.
func TestMain(m *testing.M) {
	testkit.OverlapWaits()
	os.Exit(m.Run())
}
