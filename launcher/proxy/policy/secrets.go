package policy

import (
	"fmt"
	"path"
	"strings"
)

// DefaultSecretPatterns are refused even inside a scope. Each pattern is a
// '/'-separated sequence of glob components matched, ignoring case, against
// any run of consecutive components of the path; a trailing '/' is ignored.
var DefaultSecretPatterns = []string{
	".env", ".env.*", "*.env",
	".git", ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".password-store",
	"id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx",
	".netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".htpasswd",
	"credentials", "credentials.json", "credentials.*", "*.tfstate", "secrets.*",
}

// Secrets matches paths against secret patterns.
type Secrets struct {
	patterns [][]string
}

// NewSecrets compiles patterns; a malformed glob is an error.
func NewSecrets(patterns []string) (*Secrets, error) {
	s := &Secrets{}
	for _, p := range patterns {
		p = strings.Trim(strings.ToLower(p), "/")
		if p == "" {
			return nil, fmt.Errorf("secret pattern is empty")
		}
		parts := strings.Split(p, "/")
		for _, part := range parts {
			if _, err := path.Match(part, ""); err != nil {
				return nil, fmt.Errorf("secret pattern %q: %w", p, err)
			}
		}
		s.patterns = append(s.patterns, parts)
	}
	return s, nil
}

// Match reports whether the absolute path p names a secret or lies inside one.
func (s *Secrets) Match(p string) bool {
	comps := strings.Split(strings.Trim(strings.ToLower(p), "/"), "/")
	for _, pat := range s.patterns {
		for i := 0; i+len(pat) <= len(comps); i++ {
			ok := true
			for j, part := range pat {
				if m, _ := path.Match(part, comps[i+j]); !m {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}
