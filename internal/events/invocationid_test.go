package events

import (
	"reflect"
	"testing"
)

// TestForInvocation: every envelope about one invocation says which, so a
// reader can join it without knowing its type. One with an InvocationID
// field gives that field, an Invocation its own id, and no other envelope
// claims an invocation.
func TestForInvocation(t *testing.T) {
	for name, e := range examples() {
		about, ok := e.(interface{ ForInvocation() string })
		field := reflect.ValueOf(e).Elem().FieldByName("InvocationID")
		switch inv, isInvocation := e.(*Invocation); {
		case isInvocation:
			if !ok || about.ForInvocation() != inv.ID {
				t.Errorf("%s: an invocation is not about itself", name)
			}
		case field.IsValid():
			if !ok {
				t.Errorf("%s has an InvocationID field but no ForInvocation method", name)
			} else if got, want := about.ForInvocation(), field.String(); got != want {
				t.Errorf("%s: got ForInvocation() %q, want %q", name, got, want)
			}
		case ok:
			t.Errorf("%s has no InvocationID field, yet a ForInvocation method", name)
		}
	}
}
