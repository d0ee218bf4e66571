package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestServerRequestContract: a server's request names a method toolbus
// passes on and a token to answer to; an answer carries a result or an
// error, never both or neither, within its bound.
func TestServerRequestContract(t *testing.T) {
	t.Parallel()
	exec := Identity{ID: "executor@dev-1", Role: "executor"}
	request := func(edit func(*ServerRequest)) Envelope {
		r := &ServerRequest{Header: hdr("sr", exec), InvocationID: "inv-1", Server: "s", Method: MethodSampling,
			Params: json.RawMessage(`{"messages":[]}`), AnswerTo: NewAnswerTo(), DeadlineMillis: 1000}
		edit(r)
		return r
	}
	answer := func(edit func(*ServerAnswer)) Envelope {
		a := &ServerAnswer{Header: hdr("sa", agent), InvocationID: "inv-1", Result: json.RawMessage(`{"action":"decline"}`)}
		edit(a)
		return a
	}
	for _, tc := range []struct {
		name string
		e    Envelope
		ok   bool
	}{
		{"request", request(func(*ServerRequest) {}), true},
		{"request of elicitation", request(func(r *ServerRequest) { r.Method = MethodElicitation }), true},
		{"request of roots/list", request(func(r *ServerRequest) { r.Method = "roots/list" }), false},
		{"request with no token", request(func(r *ServerRequest) { r.AnswerTo = "" }), false},
		{"request for no call", request(func(r *ServerRequest) { r.InvocationID = "" }), false},
		{"request with params not an object", request(func(r *ServerRequest) { r.Params = json.RawMessage(`[1]`) }), false},
		{"request too large", request(func(r *ServerRequest) {
			r.Params = json.RawMessage(`{"x":"` + strings.Repeat("a", MaxServerRequestParams) + `"}`)
		}), false},
		{"answer", answer(func(*ServerAnswer) {}), true},
		{"answer with an error", answer(func(a *ServerAnswer) { a.Result, a.Error = nil, &RPCError{Code: -1, Message: "no"} }), true},
		{"answer with both", answer(func(a *ServerAnswer) { a.Error = &RPCError{Code: -1, Message: "no"} }), false},
		{"answer with neither", answer(func(a *ServerAnswer) { a.Result = nil }), false},
		{"answer not an object", answer(func(a *ServerAnswer) { a.Result = json.RawMessage(`"yes"`) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Encode(tc.e)
			if tc.ok && err != nil {
				t.Fatalf("got %v, want it valid", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// TestServerAnswerIsNoConfirmAnswer: the executor tells an answer to a
// server's request from an approval by its type, so one can never be
// taken for the other on an answer subject.
func TestServerAnswerIsNoConfirmAnswer(t *testing.T) {
	t.Parallel()
	data, err := Encode(&ServerAnswer{Header: hdr("sa", agent), InvocationID: "inv-1", Result: json.RawMessage(`{"action":"accept"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode[ConfirmAnswer](data); !errors.Is(err, ErrType) {
		t.Fatalf("a server answer decoded as a confirmation answer: got %v, want ErrType", err)
	}
	data, err = Encode(&ConfirmAnswer{Header: hdr("ca", agent), InvocationID: "inv-1", Outcome: ProceedOnce})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode[ServerAnswer](data); !errors.Is(err, ErrType) {
		t.Fatalf("a confirmation answer decoded as a server answer: got %v, want ErrType", err)
	}
}
