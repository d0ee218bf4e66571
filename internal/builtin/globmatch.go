package builtin

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// maxGlobPattern bounds a glob pattern's length, and so the size of the
// matcher built from it and the cost of one match: at most a few
// milliseconds for a path of a hundred characters, whatever the pattern.
const maxGlobPattern = 1024

// globPattern is a compiled glob pattern. A pattern is translated into one
// regular expression, which Go's regexp matches in time linear in the path
// whatever the pattern holds: the alternatives of a brace group are
// alternatives of the expression, never expanded into patterns of their
// own, so 26 groups of {a,b} cost 26 alternations, not 2^26 patterns.
//
// The syntax, as Gemini CLI's glob accepts it (minimatch with dot: true),
// matched against slash-separated paths relative to the search's base:
//
//   - any run of characters other than /, dotfiles included
//     ?        one character other than /
//     [abc]    one character of the class, ranges a-z allowed; [!abc] and
//     [^abc] negate it; a class never matches /
//     {a,b}    either alternative; groups nest and may hold /
//     **       as a whole path component: any number of directories
//     (a/**/b, **/x, x/**); elsewhere the same as *
//     \c       the character c itself
//
// A { without its } is the character itself, as in bash. Unlike a
// matcher that expands braces into patterns first, a ** right after a
// group's } is not a whole component ({a,}**/b is {a,}*/b).
type globPattern struct{ re *regexp.Regexp }

func (g *globPattern) match(rel string) bool { return g.re.MatchString(rel) }

// compileGlob compiles pattern; a malformed one (an unclosed [, a trailing
// \, one too long) is an error that says why.
func compileGlob(pattern string) (*globPattern, error) {
	if len(pattern) > maxGlobPattern {
		return nil, fmt.Errorf("glob pattern of %d bytes is longer than %d", len(pattern), maxGlobPattern)
	}
	c := globCompiler{pattern: pattern}
	c.out.WriteString(`^(?s:`)
	if err := c.sequence(true, false); err != nil {
		return nil, fmt.Errorf("glob pattern %q: %w", pattern, err)
	}
	c.out.WriteString(`)$`)
	re, err := regexp.Compile(c.out.String())
	if err != nil { // too large, or not UTF-8
		return nil, fmt.Errorf("glob pattern %q cannot be matched: %w", pattern, err)
	}
	return &globPattern{re: re}, nil
}

// matchGlob says whether rel matches pattern; a malformed pattern matches
// nothing.
func matchGlob(pattern, rel string) bool {
	g, err := compileGlob(pattern)
	return err == nil && g.match(rel)
}

// globs are patterns of which any may match.
type globs []*globPattern

func compileGlobs(patterns []string) (globs, error) {
	out := make(globs, 0, len(patterns))
	for _, p := range patterns {
		g, err := compileGlob(p)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

func (gs globs) match(rel string) bool {
	for _, g := range gs {
		if g.match(rel) {
			return true
		}
	}
	return false
}

// globCompiler translates a glob pattern into a regular expression.
type globCompiler struct {
	pattern string
	i       int
	out     strings.Builder
}

// sequence translates up to the end of the pattern or, inBrace, up to the
// , or } that ends the current alternative (not consumed). atStart says
// whether the sequence begins a path component.
func (c *globCompiler) sequence(atStart, inBrace bool) error {
	for c.i < len(c.pattern) {
		ch := c.pattern[c.i]
		switch {
		case inBrace && (ch == ',' || ch == '}'):
			return nil
		case ch == '*':
			c.star(atStart, inBrace)
		case ch == '?':
			c.out.WriteString(`[^/]`)
			c.i++
		case ch == '[':
			if err := c.class(); err != nil {
				return err
			}
		case ch == '{' && c.closes(c.i):
			if err := c.braces(atStart); err != nil {
				return err
			}
		case ch == '\\':
			if c.i+1 >= len(c.pattern) {
				return fmt.Errorf("ends with an escaping \\")
			}
			c.i++
			c.literal()
		case ch == '/' && c.trailingGlobstar(c.i+1, inBrace):
			c.out.WriteString(`(?:/.*)?`) // x/** is x itself or anything below it
			c.i += 3
		default:
			c.literal()
		}
		atStart = c.pattern[c.i-1] == '/' // after a /, or after **/
	}
	return nil
}

// literal copies one character, quoted.
func (c *globCompiler) literal() {
	_, n := utf8.DecodeRuneInString(c.pattern[c.i:])
	c.out.WriteString(regexp.QuoteMeta(c.pattern[c.i : c.i+n]))
	c.i += n
}

// ends says whether position i ends a path component of the pattern.
func (c *globCompiler) ends(i int, inBrace bool) bool {
	return i >= len(c.pattern) || c.pattern[i] == '/' || inBrace && (c.pattern[i] == ',' || c.pattern[i] == '}')
}

// trailingGlobstar says whether "**" at i is a whole component that ends
// the pattern (or the alternative).
func (c *globCompiler) trailingGlobstar(i int, inBrace bool) bool {
	return strings.HasPrefix(c.pattern[i:], "**") && c.ends(i+2, inBrace) &&
		(i+2 >= len(c.pattern) || c.pattern[i+2] != '/')
}

// star translates a run of *.
func (c *globCompiler) star(atStart, inBrace bool) {
	n := 0
	for c.i+n < len(c.pattern) && c.pattern[c.i+n] == '*' {
		n++
	}
	c.i += n
	switch {
	case n == 2 && atStart && c.i < len(c.pattern) && c.pattern[c.i] == '/':
		c.out.WriteString(`(?:[^/]+/)*`) // **/: any number of directories
		c.i++
		for strings.HasPrefix(c.pattern[c.i:], "**/") { // the same again adds nothing
			c.i += 3
		}
	case n == 2 && atStart && c.ends(c.i, inBrace):
		c.out.WriteString(`.*`) // a whole pattern or alternative of **
	default:
		c.out.WriteString(`[^/]*`)
	}
}

// closes says whether the { at i has its }.
func (c *globCompiler) closes(i int) bool {
	depth := 0
	for ; i < len(c.pattern); i++ {
		switch c.pattern[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return true
			}
		}
	}
	return false
}

// braces translates a {…} group into an alternation.
func (c *globCompiler) braces(atStart bool) error {
	c.i++ // {
	c.out.WriteString(`(?:`)
	for {
		if err := c.sequence(atStart, true); err != nil {
			return err
		}
		if c.i >= len(c.pattern) {
			return fmt.Errorf("unclosed {") // closes said otherwise: a class swallowed the }
		}
		if c.pattern[c.i] == '}' {
			c.i++
			c.out.WriteString(`)`)
			return nil
		}
		c.i++ // ,
		c.out.WriteString(`|`)
	}
}

// class translates a […] character class. A class matches one character
// of a path component, so never /: a range across / is split around it.
func (c *globCompiler) class() error {
	start := c.i
	c.i++ // [
	negate := c.i < len(c.pattern) && (c.pattern[c.i] == '!' || c.pattern[c.i] == '^')
	if negate {
		c.i++
	}
	var items strings.Builder
	first := true
	for {
		if c.i >= len(c.pattern) {
			return fmt.Errorf("unclosed [ at byte %d", start)
		}
		if c.pattern[c.i] == ']' && !first {
			c.i++
			break
		}
		if c.pattern[c.i] == ']' {
			return fmt.Errorf("empty character class at byte %d", start)
		}
		first = false
		lo, err := c.classChar()
		if err != nil {
			return err
		}
		hi := lo
		if c.i+1 < len(c.pattern) && c.pattern[c.i] == '-' && c.pattern[c.i+1] != ']' {
			c.i++
			if hi, err = c.classChar(); err != nil {
				return err
			}
			if hi < lo {
				return fmt.Errorf("range %c-%c out of order at byte %d", lo, hi, start)
			}
		}
		// / is never matched: leave it out of the range.
		if lo <= '/' && '/' <= hi {
			if lo < '/' {
				writeRange(&items, lo, '/'-1)
			}
			if hi > '/' {
				writeRange(&items, '/'+1, hi)
			}
			continue
		}
		writeRange(&items, lo, hi)
	}
	switch {
	case negate:
		fmt.Fprintf(&c.out, `[^/%s]`, items.String())
	case items.Len() == 0:
		c.out.WriteString(`[^\x00-\x{10FFFF}]`) // [/]: matches nothing
	default:
		fmt.Fprintf(&c.out, `[%s]`, items.String())
	}
	return nil
}

// classChar reads one character of a class, \ escaping the next.
func (c *globCompiler) classChar() (rune, error) {
	if c.pattern[c.i] == '\\' {
		c.i++
		if c.i >= len(c.pattern) {
			return 0, fmt.Errorf("ends with an escaping \\")
		}
	}
	r, n := utf8.DecodeRuneInString(c.pattern[c.i:])
	c.i += n
	return r, nil
}

func writeRange(b *strings.Builder, lo, hi rune) {
	writeClassRune(b, lo)
	if hi != lo {
		b.WriteByte('-')
		writeClassRune(b, hi)
	}
}

// writeClassRune writes r as a character of a regexp class.
func writeClassRune(b *strings.Builder, r rune) {
	if strings.ContainsRune(`\]-^[`, r) {
		b.WriteByte('\\')
	}
	b.WriteRune(r)
}
