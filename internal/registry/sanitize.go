package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SanitizeForGemini is seed 000's sanitizeParameters applied to a JSON
// Schema: wherever a schema has anyOf, its default is dropped (Vertex AI
// refuses the two together); wherever it has an enum, it becomes
// string-typed and the enum values become strings, with null removed, as
// JavaScript's String() prints them; and, beyond the seed, a type of
// [X, "null"] becomes type X with nullable: true, as Gemini CLI does today
// for MCP tools. It recurses through anyOf, items and properties as the
// seed does. A schema decoded from JSON has no shared or
// cyclic nodes, so the seed's visited set has nothing to guard here.
//
// Deviation, on purpose: the seed sets type to the SDK's Type.STRING
// ("STRING"); this writes the JSON Schema spelling "string", since the
// declaration carries a JSON Schema.
//
// raw must be a valid JSON object. It returns changed=false, and raw
// itself, when nothing needed changing.
func SanitizeForGemini(raw json.RawMessage) (out json.RawMessage, changed bool, err error) {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' &&
		!bytes.Contains(raw, []byte(`"anyOf"`)) && !bytes.Contains(raw, []byte(`"enum"`)) && !bytes.Contains(raw, []byte(`"null"`)) {
		// Nothing to change; raw is already known to be valid JSON.
		return raw, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var schema any
	if err := dec.Decode(&schema); err != nil {
		return nil, false, fmt.Errorf("parameters: %w", err)
	}
	root, ok := schema.(map[string]any)
	if !ok {
		return nil, false, fmt.Errorf("parameters: not a JSON object")
	}
	if !sanitize(root) {
		return raw, false, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		return nil, false, fmt.Errorf("parameters: %w", err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), true, nil
}

func sanitize(s map[string]any) (changed bool) {
	changed = nullable(s)
	if anyOf, ok := s["anyOf"]; ok && truthy(anyOf) {
		if _, has := s["default"]; has {
			delete(s, "default")
			changed = true
		}
		if list, ok := anyOf.([]any); ok {
			for _, item := range list {
				if m, ok := item.(map[string]any); ok {
					changed = sanitize(m) || changed
				}
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		changed = sanitize(items) || changed
	}
	switch props := s["properties"].(type) {
	case map[string]any:
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				changed = sanitize(m) || changed
			}
		}
	case []any:
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				changed = sanitize(m) || changed
			}
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		if s["type"] != "string" {
			s["type"] = "string"
			changed = true
		}
		values := make([]any, 0, len(enum))
		for _, v := range enum {
			if v == nil {
				changed = true
				continue
			}
			str := jsString(v)
			if _, wasString := v.(string); !wasString {
				changed = true
			}
			values = append(values, str)
		}
		s["enum"] = values
	}
	return changed
}

// nullable turns a type of two, one of them "null" (as MCP servers
// written with Pydantic or zod declare optional values), into the one
// type with nullable: true, the spelling the Gemini API takes; it refuses
// a list of types. Other lists are left as they are.
func nullable(s map[string]any) bool {
	types, ok := s["type"].([]any)
	if !ok || len(types) != 2 {
		return false
	}
	a, aok := types[0].(string)
	b, bok := types[1].(string)
	switch {
	case !aok || !bok || a == b:
		return false
	case b == "null":
		s["type"] = a
	case a == "null":
		s["type"] = b
	default:
		return false
	}
	s["nullable"] = true
	return true
}

// truthy is JavaScript's truthiness of a decoded JSON value.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case json.Number:
		f, err := v.Float64()
		return err != nil || (f != 0 && !math.IsNaN(f))
	}
	return true
}

// jsString is JavaScript's String(v) for a decoded JSON value.
func jsString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return jsNumber(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			if e != nil {
				parts[i] = jsString(e)
			}
		}
		return strings.Join(parts, ",")
	case map[string]any:
		return "[object Object]"
	}
	return ""
}

// jsNumber prints a JSON number as JavaScript's Number.prototype.toString
// does: shortest round-trip digits, exponent form below 1e-6 and from 1e21.
func jsNumber(n json.Number) string {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		if math.IsInf(f, 1) {
			return "Infinity"
		}
		if math.IsInf(f, -1) {
			return "-Infinity"
		}
		return string(n)
	}
	if f == 0 {
		return "0"
	}
	if a := math.Abs(f); a >= 1e21 || a < 1e-6 {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+07 / e-07; JavaScript writes e+7 / e-7.
		mant, exp, _ := strings.Cut(s, "e")
		sign, digits := exp[:1], strings.TrimLeft(exp[1:], "0")
		return mant + "e" + sign + digits
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
