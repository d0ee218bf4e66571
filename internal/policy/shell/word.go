package shell

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// wordValue is a word as bash would pass it.
type wordValue struct {
	// value is the text bash gives the word, quotes removed and escapes
	// undone, when literal; else the word's source text.
	value string
	// literal is false when the word holds an expansion ($x, $(...),
	// $'...', $((...))).
	literal bool
	// glob is set when the word holds an unquoted *, ? or [...]: bash
	// replaces it with the names of the files it matches.
	glob bool
}

// expandWord evaluates w after brace expansion, which bash does first:
// `{rm,-rf,/}` is the three words rm -rf /.
func (a *analyzer) expandWord(src string, w *syntax.Word) []wordValue {
	// SplitBraces rewrites the word it is given; the tree is still being
	// walked, and its walker does not know the nodes it adds.
	braced := &syntax.Word{Parts: slices.Clone(w.Parts)}
	if !syntax.SplitBraces(braced) {
		return []wordValue{evalWord(src, w)}
	}
	w = braced
	var out []wordValue
	for ew, err := range expand.BracesSeq(nil, w) {
		if err != nil {
			a.opaque("a brace expansion too large to follow")
			return []wordValue{{value: source(src, w)}}
		}
		out = append(out, evalWord(src, ew))
	}
	return out
}

// evalWord evaluates a word made of literal text and quotes; any other
// part makes it not literal, and its value is then its source text.
func evalWord(src string, w *syntax.Word) wordValue {
	var b strings.Builder
	glob := false
	if !literalIn(&b, w.Parts, false, &glob) {
		return wordValue{value: source(src, w)}
	}
	return wordValue{value: b.String(), literal: true, glob: glob}
}

// literalIn writes the value bash gives parts made only of literal text
// and quotes: quotes removed and backslash escapes undone, so `\rm` and
// `r\m` are rm as `"rm"` is. $'...' (ANSI-C escapes) is not taken as
// literal. glob is set for an unquoted, unescaped pattern character.
func literalIn(b *strings.Builder, parts []syntax.WordPart, inDouble bool, glob *bool) bool {
	for _, p := range parts {
		switch p := p.(type) {
		case *syntax.Lit:
			unescape(b, p.Value, inDouble, glob)
		case *syntax.SglQuoted:
			if p.Dollar {
				return false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar || !literalIn(b, p.Parts, true, nil) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// unescape undoes bash's backslash escapes in unquoted text, or in text
// inside double quotes, where only $ ` " \ and a newline are escaped.
// When glob is not nil (unquoted text), it is set if the text holds an
// unescaped *, ? or [ ... ].
func unescape(b *strings.Builder, s string, inDouble bool, glob *bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			if glob != nil && (c == '*' || c == '?' || c == '[' && strings.IndexByte(s[i+1:], ']') >= 0) {
				*glob = true
			}
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		switch {
		case next == '\n': // a line continuation disappears
			i++
		case !inDouble || strings.IndexByte("$`\"\\", next) >= 0:
			b.WriteByte(next)
			i++
		default:
			b.WriteByte(c)
		}
	}
}

// hereText is the text a here-string or here-document feeds, and whether
// it is known exactly. A here-document whose delimiter is quoted feeds its
// body as it is; an unquoted one undoes \$ \` \\ and line continuations
// and expands the rest, so with an expansion it is not known exactly (its
// source text is returned for the deny rules to look at).
func hereText(src string, r *syntax.Redirect) (string, bool) {
	if r.Op == syntax.WordHdoc { // <<< word
		v := evalWord(src, r.Word)
		return v.value, v.literal
	}
	if r.Hdoc == nil {
		return "", true
	}
	if quotedDelimiter(r.Word) {
		var b strings.Builder
		for _, p := range r.Hdoc.Parts {
			if lit, ok := p.(*syntax.Lit); ok {
				b.WriteString(lit.Value)
			}
		}
		return b.String(), true
	}
	var b strings.Builder
	if literalIn(&b, r.Hdoc.Parts, true, nil) {
		return b.String(), true
	}
	return source(src, r.Hdoc), false
}

// quotedDelimiter reports whether a here-document's delimiter word is
// quoted in any part, which makes its body literal.
func quotedDelimiter(w *syntax.Word) bool {
	if w == nil {
		return false
	}
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.SglQuoted, *syntax.DblQuoted:
			return true
		case *syntax.Lit:
			if strings.Contains(p.Value, `\`) {
				return true
			}
		}
	}
	return false
}

// redirects lists a statement's redirections, and the one that feeds it a
// here-document or here-string, if any.
func (a *analyzer) redirects(src string, rs []*syntax.Redirect) ([]Redirect, *syntax.Redirect) {
	out := make([]Redirect, 0, len(rs))
	var fed *syntax.Redirect
	for _, r := range rs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			fed = r
			continue
		}
		if r.Word == nil {
			continue
		}
		v := evalWord(src, r.Word)
		out = append(out, Redirect{Op: r.Op.String(), Target: v.value, Literal: v.literal})
	}
	return out, fed
}
