// Package redact hides secrets in what toolbus shows of recorded events:
// the audit commands, their export and the web console. The audit stream
// keeps what was sent (a decision must stay reproducible); what leaves it
// for a person or a SIEM goes through a Redactor.
//
// Two rules, as seed 004's sanitizeParameters and the secret scanners do:
// a value under a key that names a secret (password, token, api_key,
// secret, credential, authorization, private key, cookie, ...) is hidden
// whatever it looks like; and a value that looks like a secret (a private
// key block, a cloud or forge access token, a JWT, a bearer credential, a
// password in a URL, "password=..." in a command line) is hidden wherever
// it is. Configured patterns add to the second rule.
package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Mask replaces every hidden value.
const Mask = "[REDACTED]"

// secretKeyWords are the words that make a key a secret's name, matched in
// the key folded to lower case with '-', '_', '.' and spaces removed.
var secretKeyWords = []string{
	"password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey", "privatekey",
	"credential", "authorization", "cookie", "sessionid", "clientsecret", "signature",
}

// secretKeyExact are keys that are a secret's name only when they are the
// whole key (as a substring they name too much: "author", "keyword").
var secretKeyExact = []string{"auth", "pwd", "pass", "key", "sig", "bearer"}

// SecretKey reports whether a JSON key or a variable's name names a
// secret.
func SecretKey(key string) bool {
	k := strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.', ' ':
			return -1
		}
		return r
	}, strings.ToLower(key))
	for _, w := range secretKeyWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	for _, w := range secretKeyExact {
		if k == w {
			return true
		}
	}
	return strings.HasSuffix(k, "key") && !strings.HasSuffix(k, "monkey") && len(k) > 3 && k != "hotkey" // sshkey, signingkey
}

// valuePatterns match secrets by their look, wherever they are.
var valuePatterns = []string{
	// PEM private keys, whole or cut off.
	`-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----(?s:.*?)(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)`,
	// AWS access key ids, and the secret after a name that says so.
	`\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b`,
	// GitHub, GitLab, Slack, Google, Stripe, OpenAI and Anthropic style tokens.
	`\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_-]{20,})`,
	`\bxox[abposr]-[A-Za-z0-9-]{10,}`,
	`\bAIza[0-9A-Za-z_-]{35}`,
	`\b[rs]k_(live|test)_[0-9A-Za-z]{16,}`,
	`\bsk-(ant-|proj-)?[A-Za-z0-9_-]{20,}`,
	// JSON web tokens.
	`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`,
	// Authorization header values.
	`(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{12,}`,
}

// Both keep the name and hide the value: "password=...", "TOKEN: ...",
// `"api_key": "..."`, and the password of a URL's user info.
var (
	assignment  = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|authorization|cookie)[A-Za-z0-9_.-]*)("?\s*[=:]\s*"?)([^\s"',;&]+)`)
	urlUserInfo = regexp.MustCompile(`(://[^/\s:@]+):([^/\s@]+)@`)
)

// Redactor hides secrets. The zero value is not usable; make one with New.
type Redactor struct {
	values *regexp.Regexp
}

// New is a Redactor with the built-in rules and extra, regular expressions
// (RE2 syntax) of further values to hide.
func New(extra ...string) (*Redactor, error) {
	all := append(append([]string(nil), valuePatterns...), extra...)
	for i, p := range extra {
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("redaction pattern %d (%q): %w", i+1, p, err)
		}
	}
	return &Redactor{values: regexp.MustCompile("(?:" + strings.Join(all, ")|(?:") + ")")}, nil
}

// Default is a Redactor with the built-in rules only.
var Default, _ = New()

// Text hides the secrets in free text: results, reasons, commands, diffs.
func (r *Redactor) Text(s string) string {
	s = r.values.ReplaceAllString(s, Mask)
	s = assignment.ReplaceAllString(s, "${1}${2}"+Mask)
	return urlUserInfo.ReplaceAllString(s, "${1}:"+Mask+"@")
}

// JSON hides the secrets in a JSON document: the value of every member
// whose key names a secret, whatever its type, and the secrets in every
// string. What is not valid JSON is treated as text, and comes back as a
// JSON string; nothing (no arguments) stays nothing.
func (r *Redactor) JSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		text, _ := json.Marshal(r.Text(string(raw)))
		return text
	}
	out, err := json.Marshal(r.value(v))
	if err != nil {
		return json.RawMessage(`"` + Mask + `"`)
	}
	return out
}

func (r *Redactor) value(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if SecretKey(k) && x != nil {
				out[k] = Mask
			} else {
				out[k] = r.value(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = r.value(x)
		}
		return out
	case string:
		return r.Text(t)
	}
	return v
}
