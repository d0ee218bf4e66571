package mcp

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzRequestState: a requestState is opened only as sealed. Whatever a
// client sends in its place (the fuzzer's bytes, a sealed state with one
// byte changed) opens to nothing; a sealed state opens to what was
// sealed until its expiry, and to errStateExpired one second after.
func FuzzRequestState(f *testing.F) {
	h := newHeldCalls()
	defer h.close()
	now := time.Unix(1_800_000_000, 0)
	f.Add("call-1", 2, "write_file", "agent:a", "")
	f.Add("", 0, "", "", "e30.AAAA")
	f.Add("x.y", -1, "t\x00", "facade/agent:b", "..")
	f.Fuzz(func(t *testing.T, invocation string, round int, tool, caller, sent string) {
		st := heldState{Invocation: invocation, Round: round, Tool: tool, Args: argsDigest([]byte(tool)), Caller: caller, Expires: now.Unix()}
		sealed := h.seal(st)
		// JSON spells invalid UTF-8 as U+FFFD: such a state opens to
		// another caller's name, which no retry matches.
		valid := utf8.ValidString(invocation) && utf8.ValidString(tool) && utf8.ValidString(caller)
		if got, err := h.open(sealed, now); err != nil || (valid && got != st) {
			t.Fatalf("a sealed state opens to %+v, %v; want %+v", got, err, st)
		}
		if _, err := h.open(sealed, now.Add(time.Second)); !errors.Is(err, errStateExpired) {
			t.Fatalf("a state a second past its expiry: %v, want %v", err, errStateExpired)
		}
		if sent != sealed {
			if _, err := h.open(sent, now); !errors.Is(err, errBadState) {
				t.Fatalf("%q, never sealed, opens: %v", sent, err)
			}
		}
		// Another spelling of the same state: a character that is no
		// base64 after either part, a part padded.
		data64, mac64, _ := strings.Cut(sealed, ".")
		for _, other := range []string{data64 + "!." + mac64, sealed + "!", data64 + "." + mac64 + "=="} {
			if _, err := h.open(other, now); !errors.Is(err, errBadState) {
				t.Fatalf("the sealed state spelled %q opens: %v", other, err)
			}
		}
		for _, i := range []int{0, len(sealed) / 2, len(sealed) - 1} {
			b := []byte(sealed)
			b[i] ^= 1
			if changed := string(b); changed != sealed && !strings.Contains(changed, "\x00") {
				if _, err := h.open(changed, now); !errors.Is(err, errBadState) {
					t.Fatalf("the sealed state with byte %d changed opens: %v", i, err)
				}
			}
		}
	})
}
