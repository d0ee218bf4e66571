package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toolbus/toolbus/internal/events"
)

// MaxNameLength bounds a discovered tool's name, which is also an argument
// of its call command.
const MaxNameLength = 256

// maxWarnings bounds the warnings of one discovery: a command that prints
// 10,000 nameless declarations says so in a few lines.
const maxWarnings = 20

// ParseDeclarations reads the output of a discovery command as Gemini CLI
// does (seed 000 discoverAndRegisterToolsFromCommand): a JSON array whose
// items each hold a function_declarations or functionDeclarations array of
// declarations (in that order of preference) or are a declaration
// themselves, with a name. A declaration's parameters are its
// parametersJsonSchema (what Gemini CLI reads now) or else its parameters
// (what it read before), whichever is a JSON object; neither gives {}.
//
// What does not fit is skipped with a warning, the rest still comes: an
// item that is no declaration, a declaration with no name, a name that is
// not a string, not a single word, longer than MaxNameLength or starting
// with '-' (the name is its call command's last argument, and would read as
// an option), and a name given twice in one output (the first one is kept,
// as a later one would overwrite it in Gemini CLI's registry only by
// accident of order). Every spec is of kind other: what a declaration says
// of its own kind, read-only-ness or annotations is ignored, since the
// policy must not take a project's word that its command only reads.
//
// It fails on output that is not one JSON array, also when it is not
// strictly JSON: trailing data, invalid UTF-8, or a name given twice in
// one object (which parsers read differently) fails the whole output.
func ParseDeclarations(stdout []byte) ([]events.ToolSpec, []string, error) {
	data := bytes.TrimSpace(stdout)
	if len(data) == 0 {
		return nil, nil, errors.New("the discovery command printed nothing; want a JSON array of function declarations")
	}
	dec := jsontext.NewDecoder(bytes.NewBuffer(data))
	switch k := dec.PeekKind(); k {
	case '[':
	case jsontext.KindInvalid:
		_, err := dec.ReadToken()
		return nil, nil, fmt.Errorf("the discovery output is not JSON: %v", err)
	default:
		return nil, nil, fmt.Errorf("the discovery output is a JSON %s, not an array of function declarations", kindName(k))
	}
	// The arena holds a copy of every schema taken; it never grows past the
	// output, so the specs can share it as it is filled.
	p := &parser{dec: dec, arena: make([]byte, 0, len(data)), seen: make(map[string]bool)}
	if err := p.array(); err != nil {
		return nil, nil, fmt.Errorf("the discovery output is not valid JSON: %v", err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, nil, fmt.Errorf("the discovery output is not one JSON array: more follows it at byte %d", dec.InputOffset())
	}
	if p.dropped > 0 {
		p.warnings = append(p.warnings, fmt.Sprintf("... and %d more warnings", p.dropped))
	}
	if len(p.warnings) == 0 { // some taken back
		p.warnings = nil
	}
	// Made once, of the right length: a ToolSpec is large, and growing a
	// slice of 10,000 of them by appends took a third of the time.
	var specs []events.ToolSpec
	if p.taken.n > 0 {
		specs = make([]events.ToolSpec, 0, p.taken.n)
	}
	for _, chunk := range p.taken.chunks {
		for i := range chunk {
			t := &chunk[i]
			specs = append(specs, events.ToolSpec{Name: t.name, Description: t.description, Kind: events.KindOther, Parameters: t.params})
		}
	}
	return specs, p.warnings, nil
}

// The parser reads the output in one pass of a jsontext.Decoder, taking
// declarations as they come; a functionDeclarations list taken before a
// function_declarations list of the same item is taken back.
type parser struct {
	dec      *jsontext.Decoder
	arena    []byte
	taken    taken
	seen     map[string]bool
	warnings []string
	dropped  int
	items    int // items of the top-level array read
}

// taken are the declarations taken, in chunks that are never copied as
// they grow.
type taken struct {
	chunks [][]decl
	n      int
}

const chunkLen = 1024

func (t *taken) add(d decl) {
	if len(t.chunks) == 0 || len(t.chunks[len(t.chunks)-1]) == chunkLen {
		t.chunks = append(t.chunks, make([]decl, 0, chunkLen))
	}
	last := &t.chunks[len(t.chunks)-1]
	*last = append(*last, d)
	t.n++
}

// truncate takes back the declarations after the first n, and calls
// forget with each.
func (t *taken) truncate(n int, forget func(*decl)) {
	for t.n > n {
		last := &t.chunks[len(t.chunks)-1]
		forget(&(*last)[len(*last)-1])
		*last = (*last)[:len(*last)-1]
		if len(*last) == 0 {
			t.chunks = t.chunks[:len(t.chunks)-1]
		}
		t.n--
	}
}

func (p *parser) warn(format string, args ...any) {
	if len(p.warnings) >= maxWarnings {
		p.dropped++
		return
	}
	p.warnings = append(p.warnings, fmt.Sprintf(format, args...))
}

// decl is a declaration's fields, as read.
type decl struct {
	name, description  string
	nameKind, descKind jsontext.Kind // 0: absent
	// The two schemas, when they are objects (copies in the arena), and
	// what they are.
	params, paramsSchema         []byte
	paramsKind, paramsSchemaKind jsontext.Kind
}

// mark is the parser's state before a list was taken, to take it back.
type mark struct{ taken, warnings, dropped int }

// item is what is known of a top-level item as it is read: its fields as
// a declaration, and which of its lists was taken.
type item struct {
	index int
	decl
	list   int // -1: none; 0: function_declarations; 1: functionDeclarations
	before mark
}

func (p *parser) array() error {
	if _, err := p.dec.ReadToken(); err != nil { // [
		return err
	}
	for p.dec.PeekKind() != ']' {
		it := &item{index: p.items, list: -1}
		p.items++
		if kind := p.dec.PeekKind(); kind != '{' {
			if err := p.dec.SkipValue(); err != nil {
				return err
			}
			p.warn("item %d is a JSON %s, not an object; skipped", it.index, kindName(kind))
			continue
		}
		if err := p.object(&it.decl, it); err != nil {
			return err
		}
		switch {
		case it.list >= 0:
		case it.nameKind != 0 && !falsy(it.nameKind, it.name):
			p.declaration(place{item: it.index, entry: -1}, &it.decl)
		default:
			p.warn("item %d has no function_declarations or functionDeclarations array and no name; skipped", it.index)
		}
	}
	_, err := p.dec.ReadToken() // ]
	return err
}

// The member names read, as they appear in JSON without escapes.
var (
	nameName         = []byte(`"name"`)
	nameDescription  = []byte(`"description"`)
	nameParams       = []byte(`"parameters"`)
	nameParamsSchema = []byte(`"parametersJsonSchema"`)
	listNames        = [2][]byte{[]byte(`"function_declarations"`), []byte(`"functionDeclarations"`)}
	listTexts        = [2]string{"function_declarations", "functionDeclarations"}
)

// member reads an object member's name, as its raw JSON: a name written
// with escapes ("n\u0061me") is unquoted and quoted again, so that it is
// compared as the name it stands for.
func (p *parser) member() ([]byte, error) {
	v, err := p.dec.ReadValue()
	if err != nil || bytes.IndexByte(v, '\\') < 0 {
		return v, err
	}
	return jsontext.AppendQuote(nil, string(jsontext.Value(v).Clone()))
}

// object reads a JSON object as a declaration into d, and, for a top-level
// item (it not nil), takes its lists of declarations.
func (p *parser) object(d *decl, it *item) error {
	if _, err := p.dec.ReadToken(); err != nil { // {
		return err
	}
	for p.dec.PeekKind() != '}' {
		field, err := p.member()
		if err != nil {
			return err
		}
		kind := p.dec.PeekKind()
		switch {
		case bytes.Equal(field, nameName):
			d.nameKind = kind
			if kind == '"' {
				if d.name, err = p.string(); err != nil {
					return err
				}
				continue
			}
		case bytes.Equal(field, nameDescription):
			d.descKind = kind
			if kind == '"' {
				if d.description, err = p.string(); err != nil {
					return err
				}
				continue
			}
		case bytes.Equal(field, nameParams) || bytes.Equal(field, nameParamsSchema):
			schema := bytes.Equal(field, nameParamsSchema) // before the read: field may be the decoder's
			v, err := p.dec.ReadValue()
			if err != nil {
				return err
			}
			var copied []byte
			if kind == '{' {
				start := len(p.arena)
				p.arena = append(p.arena, v...)
				copied = p.arena[start:len(p.arena):len(p.arena)]
			}
			if schema {
				d.paramsSchema, d.paramsSchemaKind = copied, kind
			} else {
				d.params, d.paramsKind = copied, kind
			}
			continue
		case it != nil && kind == '[' && (bytes.Equal(field, listNames[0]) || bytes.Equal(field, listNames[1])):
			list := 0
			if bytes.Equal(field, listNames[1]) {
				list = 1
			}
			if err := p.takeList(it, list); err != nil {
				return err
			}
			continue
		}
		if err := p.dec.SkipValue(); err != nil {
			return err
		}
	}
	_, err := p.dec.ReadToken() // }
	return err
}

func (p *parser) string() (string, error) {
	t, err := p.dec.ReadToken()
	return t.String(), err
}

// takeList reads one of an item's lists of declarations, and takes its
// declarations unless the item's function_declarations list was taken
// already: it wins over functionDeclarations, which it takes back when
// it comes second. An element that is not an object is a declaration
// without a name.
func (p *parser) takeList(it *item, list int) error {
	switch {
	case it.list == 0: // function_declarations was taken
		return p.dec.SkipValue()
	case it.list == 1: // list is function_declarations: take functionDeclarations back
		p.taken.truncate(it.before.taken, func(d *decl) { delete(p.seen, d.name) })
		p.warnings, p.dropped = p.warnings[:it.before.warnings], it.before.dropped
	}
	it.list, it.before = list, mark{p.taken.n, len(p.warnings), p.dropped}
	if _, err := p.dec.ReadToken(); err != nil { // [
		return err
	}
	for entry := 0; p.dec.PeekKind() != ']'; entry++ {
		var d decl
		if p.dec.PeekKind() == '{' {
			if err := p.object(&d, nil); err != nil {
				return err
			}
		} else if err := p.dec.SkipValue(); err != nil {
			return err
		}
		p.declaration(place{item: it.index, list: listTexts[list], entry: entry}, &d)
	}
	_, err := p.dec.ReadToken() // ]
	return err
}

// place is where a declaration is in the output, for warnings: formatted
// only when one is given.
type place struct {
	item  int
	list  string
	entry int // -1: the item itself
}

func (w place) String() string {
	if w.entry < 0 {
		return fmt.Sprintf("item %d", w.item)
	}
	return fmt.Sprintf("item %d %s[%d]", w.item, w.list, w.entry)
}

// falsy says whether a JSON value of kind (a string's value s) is false
// to JavaScript: Gemini CLI skips a declaration whose name is.
func falsy(kind jsontext.Kind, s string) bool {
	return kind == 'n' || kind == 'f' || (kind == '"' && s == "")
}

// declaration takes d, unless it is not a declaration toolbus can host.
func (p *parser) declaration(where place, d *decl) {
	switch {
	case d.nameKind == 0 || falsy(d.nameKind, d.name):
		p.warn("%s: a tool with no name; skipped", where)
		return
	case d.nameKind != '"':
		p.warn("%s: the name is a JSON %s, not a string; skipped", where, kindName(d.nameKind))
		return
	}
	if why := badName(d.name); why != "" {
		p.warn("%s: tool %q: %s; skipped", where, d.name, why)
		return
	}
	if p.seen[d.name] {
		p.warn("%s: tool %q is declared again; the first declaration is kept", where, d.name)
		return
	}
	p.seen[d.name] = true
	// parametersJsonSchema first: what Gemini CLI reads now.
	if d.paramsSchema != nil {
		d.params = d.paramsSchema
	}
	if d.params == nil {
		d.params = []byte("{}")
		for _, k := range []jsontext.Kind{d.paramsSchemaKind, d.paramsKind} {
			if k != 0 && k != 'n' {
				p.warn("%s: the parameters of tool %q are a JSON %s, not an object; the tool takes any arguments", where, d.name, kindName(k))
				break
			}
		}
	}
	if d.descKind != 0 && d.descKind != '"' && d.descKind != 'n' {
		p.warn("%s: the description of tool %q is a JSON %s, not a string; left empty", where, d.name, kindName(d.descKind))
	}
	p.taken.add(*d)
}

// badName says why name cannot be a discovered tool's name, or "".
func badName(name string) string {
	switch {
	case len(name) > MaxNameLength:
		return fmt.Sprintf("the name is longer than %d bytes", MaxNameLength)
	case strings.HasPrefix(name, "-"):
		return "the name starts with '-', and its call command would read it as an option"
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0:
		return "the name holds a space, a control character or an invalid character"
	}
	return ""
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return k.String()
}
