package launcher_test

import (
	"os"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

func TestMain(m *testing.M) { os.Exit(fencetest.Run(m)) }
