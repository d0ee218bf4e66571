package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOIDCFlags: the sign-in's flags stop the command before anything
// starts when one is given without the others it needs, the client
// secret is readable by others, a URL is not one, or there is no console
// to sign in to.
func TestOIDCFlags(t *testing.T) {
	t.Parallel()
	open := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(open, []byte("client-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	private := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(private, []byte("client-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no client", []string{"console", "--oidc-issuer", "https://id.example.com"}, "needs --oidc-client-id and --oidc-client-secret-file"},
		{"client alone", []string{"console", "--oidc-client-id", "c"}, "go with --oidc-issuer"},
		{"open secret", []string{"console", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", open}, "chmod 600"},
		{"not a URL", []string{"console", "--oidc-issuer", "id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", private}, "http(s) URLs"},
		{"no console", []string{"up", "--console", "off", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", private}, "--console off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := toolbus(t, tc.args...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, errOut, tc.want)
			}
		})
	}
}
