package events

import (
	"strings"
	"testing"
)

// The subjects an executor reads principals from are untrusted: whatever
// a sender makes of them, the reading is either refused or the principal
// a sender of that name would have put there.
func FuzzPrincipalSubjects(f *testing.F) {
	for _, s := range []string{"toolbus.request.tool.invoke.alice", "toolbus.request.tool.invoke._", "toolbus.request.tool.invoke.",
		"toolbus.request.tool.invoke.a.b", "tool.invoke.alice", "toolbus.answer.X.approver.bob",
		"toolbus.answer.X.caller._", "toolbus.answer.X.root.bob", "toolbus.answer.X.approver", "toolbus.answer.X.approver.a.b",
		"toolbus.request.tool.invoke.batch.alice", "toolbus.request.tool.invoke.batch.a", "toolbus.request.tool.invoke.a.b.c",
		"toolbus.output.facade.alice", "toolbus.request.tool.cancel.facade.*", "toolbus.request.tool.invoke._.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		if p, proven, err := PrincipalOf(Request(SubjectInvoke), subject); err == nil {
			if InvokeSubject(p) != subject && !(p == Unproven && subject == InvokeSubject("")) {
				t.Fatalf("%q read as %q", subject, p)
			}
			if proven != (p != Unproven) || strings.Contains(p, ".") || p == "" || strings.Count(p, "/") > 1 {
				t.Fatalf("%q: principal %q proven %v", subject, p, proven)
			}
		}
		// Every binding subject: a principal read is one a sender of
		// that name (a facade's client: two valid names) would have
		// put there, and the batch subject is never an invocation's.
		if p, ok := SubjectPrincipal(subject); ok {
			facade, client, two := SplitClient(p)
			if two && (ValidPrincipal(facade) != nil || ValidClient(client) != nil) || p == "" || strings.ContainsAny(p, ".") {
				t.Fatalf("%q read as the invalid principal %q", subject, p)
			}
			found := false
			for _, make := range []func(string) string{InvokeBatchSubject, InvokeSubject, CancelSubject, CallerRecordSubject, OutputSubject,
				func(p string) string { return SubjectInvoke + "." + principalToken(p) }, CallerResultSubject,
				func(p string) string { return SubjectCancel + "." + principalToken(p) }, func(p string) string { return SubjectInvokeBatch + "." + principalToken(p) }} {
				found = found || make(p) == subject
			}
			if !found {
				t.Fatalf("%q read as %q, which names it on no subject", subject, p)
			}
			if strings.HasPrefix(subject, InvokeBatchSubject("x")[:len(InvokeBatchSubject("x"))-1]) && InvokeSubject(p) == subject {
				t.Fatalf("the batch subject %q read as an invocation of %q", subject, p)
			}
		}
		const answerTo = "toolbus.answer.X"
		if as, p, proven, err := SplitAnswerSubject(answerTo, subject); err == nil {
			if AnswerSubject(answerTo, as, p) != subject {
				t.Fatalf("%q read as %s %q", subject, as, p)
			}
			if as != AnswerAsApprover && as != AnswerAsCaller || proven != (p != Unproven) || strings.Contains(p, ".") || strings.Count(p, "/") > 1 {
				t.Fatalf("%q: %s %q %v", subject, as, p, proven)
			}
		}
	})
}

func TestCallerIsBoundToItsPrincipal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		claimed, principal string
		proven, ok, want   bool
	}{
		{"alice", "alice", true, true, true},
		{"alice/agent:x", "alice", true, true, true},
		{"alicex", "alice", true, false, false},
		{"bob", "alice", true, false, false},
		{"alice/", "alice", true, true, true},
		{"bob", Unproven, false, true, false},
		{"bob", "alice", false, true, false}, // no identities: a claim
	} {
		id, err := Caller(Identity{ID: c.claimed, Proven: true}, c.principal, c.proven)
		if (err == nil) != c.ok || err == nil && id.Proven != c.want {
			t.Errorf("%+v: %+v %v", c, id, err)
		}
	}
	if err := ValidPrincipal("_"); err == nil {
		t.Error("the unproven token is a valid name")
	}
}
