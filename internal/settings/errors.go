package settings

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Error is a settings file that does not read: a syntax error, a top level
// that is not an object, or a value of the wrong type or form, at Line and
// Column of File.
type Error struct {
	// File is the file's path or name; empty when the data had none.
	File string
	// Line and Column say where, counted from 1; Column counts bytes.
	Line, Column int
	// Msg says what is wrong, naming the key when there is one:
	// "tools.callEnv is not a list of strings".
	Msg string
	// Err is the cause: ErrSyntax for data that is not JSON.
	Err error
}

// Error reads FILE:LINE:COLUMN: MSG, or "line L, column C: MSG" when the
// data had no name.
func (e *Error) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrSyntax is the cause of an Error for data that is not JSON (with
// comments) at all.
var ErrSyntax = errors.New("not JSON")

// valueError is a value of the right JSON type that does not read. Its msg
// follows the key in the message, separator included:
// "tools.discoveryInterval" + `: "often" is not a duration`.
type valueError struct{ msg string }

func (e *valueError) Error() string { return strings.TrimLeft(e.msg, ": ") }

// errorAt turns an error of the JSON decoder into an *Error at its place in
// data.
func errorAt(data []byte, name string, err error) error {
	var sem *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &sem):
		return newError(data, name, sem.ByteOffset, describe(sem), err)
	case errors.As(err, &syn):
		msg := syn.Err.Error()
		if errors.Is(syn.Err, io.ErrUnexpectedEOF) {
			msg = "unexpected end of JSON input"
		}
		return newError(data, name, syn.ByteOffset, msg, ErrSyntax)
	}
	return newError(data, name, 0, err.Error(), err)
}

// newError is an Error at byte offset off of data.
func newError(data []byte, name string, off int64, msg string, cause error) *Error {
	before := data[:min(max(off, 0), int64(len(data)))]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return &Error{File: name, Line: 1 + bytes.Count(before, []byte("\n")), Column: 1 + len(before) - lineStart, Msg: msg, Err: cause}
}

// describe says what a value of the wrong type or form is, naming its key.
func describe(e *json.SemanticError) string {
	key := keyPath(e.JSONPointer)
	var v *valueError
	if errors.As(e.Err, &v) {
		return key + v.msg
	}
	msg := key + " is not " + want(e.GoType)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// wants say what a value of a type must be, where its kind alone would say
// too little.
var wants = map[reflect.Type]string{
	reflect.TypeFor[[]string]():          "a list of strings",
	reflect.TypeFor[map[string]string](): "an object of strings",
	reflect.TypeFor[names]():             "a list of server names",
	reflect.TypeFor[servers]():           "an object of server entries",
	reflect.TypeFor[[]Hook]():            "a list of hooks",
}

// want says what a value read into a Go value of type t must be.
func want(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of the right type"
	}
	if w, ok := wants[t]; ok {
		return w
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64, reflect.Int, reflect.Int64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of the right type"
}

// kindName names a JSON value's kind, after "but".
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't':
		return "true"
	case 'f':
		return "false"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "nothing"
}

// keyPath names the value at ptr as the agents' documentation writes keys,
// "tools.callEnv[1]"; within hooks, as the hooks' own messages count them,
// "hooks.PreToolUse: group 0, hook 1: command".
func keyPath(ptr jsontext.Pointer) string {
	toks := slices.Collect(ptr.Tokens())
	var b strings.Builder
	if len(toks) >= 3 && toks[0] == "hooks" && isIndex(toks[2]) {
		b.WriteString("hooks." + toks[1] + ": group " + toks[2])
		toks = toks[3:]
		if len(toks) >= 2 && toks[0] == "hooks" && isIndex(toks[1]) {
			b.WriteString(", hook " + toks[1])
			toks = toks[2:]
		}
		if len(toks) > 0 {
			b.WriteString(": ")
		}
	}
	for i, t := range toks {
		switch {
		case isIndex(t):
			b.WriteString("[" + t + "]")
		case i > 0:
			b.WriteString("." + t)
		default:
			b.WriteString(t)
		}
	}
	return b.String()
}

func isIndex(tok string) bool {
	_, err := strconv.ParseUint(tok, 10, 64)
	return err == nil
}
