package confirmtui

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every string a request carries comes from the agent's side of the bus:
// an agent led by a prompt injection chooses tool names, arguments, diffs
// and commands. Before any of it reaches the terminal it is made inert:
// control characters (ESC and the C1 set among them, which start escape
// sequences), invalid UTF-8 and the bidirectional overrides that make text
// read differently from what it is are shown as escapes in Go syntax
// (`\x1b`, `\u202e`), as text; so are the line and paragraph separators,
// which some terminals and fonts break lines at.

// cleanLine makes s safe to print on one line: newlines are shown as \n.
func cleanLine(s string) string { return clean(s, false) }

// cleanText makes s safe to print over several lines: newlines stay, tabs
// become spaces (a tab's width depends on the terminal), and every other
// control character is shown as an escape.
func cleanText(s string) string { return clean(s, true) }

func clean(s string, multiline bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case multiline && r == '\n':
			b.WriteByte('\n')
		case r == '\t':
			b.WriteString("    ")
		case r == '\r' && multiline && strings.HasPrefix(s[i+size:], "\n"):
			// CRLF line ends are common in files; the CR is dropped.
		case unicode.IsControl(r) || isBidi(r) || unicode.Is(unicode.Cf, r) && r != '\u200d' || r == '\u2028' || r == '\u2029':
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// isBidi reports the explicit direction formatting characters (the
// "Trojan Source" ones).
func isBidi(r rune) bool {
	return r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069' || r == '\u200e' || r == '\u200f' || r == '\u061c'
}
