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

// A client of a facade is named on the subjects as two tokens, read back
// as facade/client; "batch" names no identity, since the batch subjects
// would then be a facade's clients'.
func TestClientPrincipalSubjects(t *testing.T) {
	t.Parallel()
	if err := ValidPrincipal("batch"); err == nil {
		t.Error(`"batch" may name an identity`)
	}
	for _, name := range []string{"facade", "agent-2", "a_b"} {
		if err := ValidPrincipal(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	alice := ClientPrincipal("facade", "alice")
	for subject, want := range map[string]string{
		InvokeSubject(alice):         "facade/alice",
		CancelSubject(alice):         "facade/alice",
		OutputSubject(alice):         "facade/alice",
		CallerRecordSubject(alice):   "facade/alice",
		CallerResultSubject(alice):   "facade/alice",
		InvokeBatchSubject("alice"):  "alice",
		InvokeSubject("agent"):       "agent",
		SubjectInvoke + ".facade.x1": "facade/x1",
	} {
		if got, ok := SubjectPrincipal(subject); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", subject, got, ok, want)
		}
	}
	if InvokeSubject(alice) != "toolbus.request.tool.invoke.facade.alice" {
		t.Errorf("alice's invoke subject is %s", InvokeSubject(alice))
	}
	for _, subject := range []string{"toolbus.request.tool.invoke.Facade.alice", "toolbus.request.tool.invoke.facade.a.b",
		"toolbus.request.tool.invoke.facade.", "toolbus.request.tool.invoke.a/b", "toolbus.request.tool.invoke.batch.alice.x.y", "tool.other.alice"} {
		if got, ok := SubjectPrincipal(subject); ok {
			t.Errorf("%s read as %q", subject, got)
		}
	}
	as, p, proven, err := SplitAnswerSubject("toolbus.answer.X", AnswerSubject("toolbus.answer.X", AnswerAsCaller, alice))
	if err != nil || as != AnswerAsCaller || p != alice || !proven {
		t.Errorf("alice's answer subject: %s %q %v %v", as, p, proven, err)
	}
	if _, _, _, err := SplitAnswerSubject("toolbus.answer.X", "toolbus.answer.Y.caller.bob"); err == nil {
		t.Error("an answer below another request's token was read")
	}
}
