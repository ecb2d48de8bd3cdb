package explain

import (
	"os"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/pintest"
)

// TestMain fails the package when a daemon it started left probes pinned.
func TestMain(m *testing.M) { os.Exit(pintest.Main(m)) }
