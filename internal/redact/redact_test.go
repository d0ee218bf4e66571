package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// The secrets of the tests: none may survive redaction.
var secrets = []string{
	"hunter2-very-secret",
	"AKIAIOSFODNN7EXAMPLE",
	"ghp_0123456789abcdefghijABCDEFGHIJ0123456789",
	"xoxb-123456789012-abcdefghijkl",
	"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
	"sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
	"AIzaSyA-1234567890abcdefghijklmnopqrstu",
	"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
}

func TestJSONHidesSecretMembersAndLookingLikeSecrets(t *testing.T) {
	in := `{"command":"curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://u:hunter2-very-secret@example.com/x",
		"password":"hunter2-very-secret","nested":{"API_KEY":42,"list":["AKIAIOSFODNN7EXAMPLE",{"client-secret":{"a":1}}]},
		"env":"GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ0123456789 SLACK=xoxb-123456789012-abcdefghijkl",
		"jwt":"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"note":"my key is sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345 and AIzaSyA-1234567890abcdefghijklmnopqrstu",
		"pem":"-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END RSA PRIVATE KEY-----",
		"file_path":"README.md","author":"ada","keyword":"tokenless?"}`
	out := string(Default.JSON(json.RawMessage(in)))
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%q survived: %s", s, out)
		}
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out)
	}
	// What is no secret stays as it was.
	if got["file_path"] != "README.md" || got["author"] != "ada" || got["keyword"] != "tokenless?" {
		t.Errorf("too much hidden: %s", out)
	}
	if got["password"] != Mask || got["nested"].(map[string]any)["API_KEY"] != Mask {
		t.Errorf("secret members: %s", out)
	}
	if !strings.Contains(out, "https://u:"+Mask+"@example.com") || !strings.Contains(out, "GITHUB_TOKEN="+Mask) {
		t.Errorf("names kept, values hidden: %s", out)
	}
}

func TestTextAndConfiguredPatterns(t *testing.T) {
	r, err := New(`\bACME-[0-9]{6}\b`)
	if err != nil {
		t.Fatal(err)
	}
	out := r.Text("export DB_PASSWORD=hunter2-very-secret; deploy --license ACME-123456 --token=abc123def")
	for _, s := range []string{"hunter2-very-secret", "ACME-123456", "abc123def"} {
		if strings.Contains(out, s) {
			t.Errorf("%q survived: %s", s, out)
		}
	}
	if !strings.Contains(out, "DB_PASSWORD="+Mask) || !strings.Contains(out, "deploy --license") {
		t.Errorf("got %s", out)
	}
	if _, err := New(`(unclosed`); err == nil || !strings.Contains(err.Error(), "pattern 1") {
		t.Errorf("a bad pattern: %v", err)
	}
	// Not JSON is redacted as text, and comes back as a JSON string.
	if got := string(Default.JSON(json.RawMessage(`password=hunter2-very-secret {`))); strings.Contains(got, "hunter2") || got[0] != '"' {
		t.Errorf("got %s", got)
	}
}

// FuzzJSON: whatever the recorded arguments are, redaction never panics,
// gives valid JSON, and no planted secret survives it.
func FuzzJSON(f *testing.F) {
	f.Add(`{"a":"b"}`, 0)
	f.Add(`[1,{"token":null},"x"]`, 3)
	f.Add(`"just a string"`, 5)
	f.Add(`not json`, 1)
	f.Fuzz(func(t *testing.T, doc string, which int) {
		if which < 0 {
			which = -which
		}
		secret := secrets[which%len(secrets)]
		// Planted as it is met: on its own when its look gives it away,
		// else after a name that does.
		planted := map[string]string{
			"hunter2-very-secret": "DB_PASSWORD=hunter2-very-secret",
			"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----",
		}[secret]
		if planted == "" {
			planted = secret
		}
		for _, in := range []string{doc, `{"x":` + jsonString(doc+" "+planted+" "+doc) + `}`, `{"password":` + jsonString(doc) + `}`} {
			out := Default.JSON(json.RawMessage(in))
			if strings.TrimSpace(in) == "" {
				if len(out) != 0 {
					t.Fatalf("no arguments became %q", out)
				}
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("not JSON: %q -> %q", in, out)
			}
			if strings.Contains(in, secret) && strings.Contains(string(out), secret) {
				t.Fatalf("%q survived in %q", secret, out)
			}
		}
		_ = Default.Text(doc)
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
