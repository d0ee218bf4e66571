package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// GenerateValidName is Gemini CLI's generateValidName (seed 000): every
// character outside [a-zA-Z0-9_.-] becomes "_", and a name longer than 63
// characters becomes its first 28 characters, "___" and its last 32.
//
// JavaScript strings are UTF-16, and the seed's regular expression has no
// "u" flag, so a character outside the Basic Multilingual Plane (two UTF-16
// code units) becomes "__". This function does the same, so a name gets
// the catalogue name Gemini CLI would give it.
func GenerateValidName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		switch {
		case r < utf8.RuneSelf && validNameByte(byte(r)):
			b.WriteByte(byte(r))
		case r > 0xFFFF:
			b.WriteString("__")
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:28] + "___" + s[len(s)-32:]
	}
	return s
}

func validNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// QualifiedName is the name an MCP tool takes when its own name is taken
// (seed 000 asFullyQualifiedTool): "server__tool". The seed passes it on
// unchecked; this passes it through GenerateValidName as Gemini CLI does
// today, since a server name with a space or a slash would otherwise give a
// name the Gemini API refuses. For valid names the two agree.
func QualifiedName(server, serverToolName string) string {
	return GenerateValidName(server + "__" + serverToolName)
}

// maxExportName is the longest name OpenAI and Anthropic accept.
const maxExportName = 64

// ExportName is the name a tool gets in the OpenAI and Anthropic formats,
// which allow only [a-zA-Z0-9_-] and at most 64 characters. A name that
// already fits is kept. Any other name is made to fit and given a suffix
// from a hash of the whole name, so distinct names stay distinct; salt
// (0 for the first try) varies the hash when the registry finds a clash.
func ExportName(name string, salt int) string {
	if salt == 0 && fitsExport(name) {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if validNameByte(c) && c != '.' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	base := b.String()
	h := sha256.New()
	h.Write([]byte(name))
	if salt > 0 {
		h.Write([]byte{0, byte(salt >> 8), byte(salt)})
	}
	suffix := "_" + hex.EncodeToString(h.Sum(nil))[:8]
	if len(base) > maxExportName-len(suffix) {
		base = base[:maxExportName-len(suffix)]
	}
	return base + suffix
}

func fitsExport(name string) bool {
	if name == "" || len(name) > maxExportName {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !validNameByte(c) || c == '.' {
			return false
		}
	}
	return true
}
