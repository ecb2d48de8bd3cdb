package runcmd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestSecretPatternFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secrets.txt")
	os.WriteFile(file, []byte("# team list\n*.sqlite\n\n.vault\n"), 0o600)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	tests := []struct {
		name    string
		e       proxyExtension
		want    []string // nil: the built-in list
		wantErr bool
	}{
		{"default", proxyExtension{}, nil, false},
		{"extra adds to the built-in list", proxyExtension{secretExtra: cli.StringList{"*.sqlite"}}, append(slices.Clone(schema.DefaultSecretPatterns), "*.sqlite"), false},
		{"file replaces", proxyExtension{secretFile: file}, []string{"*.sqlite", ".vault"}, false},
		{"file plus extra", proxyExtension{secretFile: file, secretExtra: cli.StringList{"*.db"}}, []string{"*.sqlite", ".vault", "*.db"}, false},
		{"empty file refused", proxyExtension{secretFile: empty}, nil, true},
		{"missing file refused", proxyExtension{secretFile: filepath.Join(dir, "nope")}, nil, true},
		{"bad glob refused", proxyExtension{secretExtra: cli.StringList{"[a-"}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.e.secretPatterns()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("accepted: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("patterns = %v, want %v", got, tt.want)
			}
		})
	}
}
