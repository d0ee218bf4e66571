package confirmtui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// JSONEvent is one line `toolbus confirm --json` prints. The first is
// ready, once the approver is registered and executors ask it.
//
//	{"event":"ready","approver":"approver:ada"}
//	{"event":"request","answerTo":"…","invocationId":"…","request":{…ConfirmRequest…},"deadline":"…"}
//	{"event":"answered","answerTo":"…","invocationId":"…","by":"approver:ada","outcome":"proceed_once"}
//	{"event":"rejected","answerTo":"…","invocationId":"…","by":"…","outcome":"…","reason":"…"}
//	{"event":"closed","answerTo":"…","invocationId":"…","errorType":"CONFIRMATION_TIMEOUT","reason":"…"}
//	{"event":"ack","answerTo":"…","invocationId":"…","accepted":true}
//	{"event":"ack","answerTo":"…","invocationId":"…","accepted":false,"reason":"…"}
//	{"event":"error","line":3,"error":"…"}
//	{"event":"disconnected","reason":"…"}
//	{"event":"reconnected"}
type JSONEvent struct {
	Event    string `json:"event"`
	Approver string `json:"approver,omitempty"`
	// AnswerTo names the request an event is about, and an answer
	// names it back: the request's own token, never the invocation id,
	// which two callers may share.
	AnswerTo     string                 `json:"answerTo,omitempty"`
	InvocationID string                 `json:"invocationId,omitempty"`
	Request      *events.ConfirmRequest `json:"request,omitempty"`
	Deadline     *time.Time             `json:"deadline,omitempty"`
	By           string                 `json:"by,omitempty"`
	Outcome      events.Outcome         `json:"outcome,omitempty"`
	ErrorType    string                 `json:"errorType,omitempty"`
	Accepted     *bool                  `json:"accepted,omitempty"`
	// Approval and Of: an accepted answer that counts as approval
	// Approval of the Of people the call needs, which waits for the rest.
	Approval int    `json:"approval,omitempty"`
	Of       int    `json:"of,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Line     int    `json:"line,omitempty"`
	Error    string `json:"error,omitempty"`
}

// JSONAnswer is one line `toolbus confirm --json` reads:
//
//	{"answerTo":"…","invocationId":"…","outcome":"proceed_once"}
//	{"answerTo":"…","invocationId":"…","outcome":"modify_with_editor","args":{"path":"/w/x"}}
//	{"answerTo":"…","invocationId":"…","outcome":"cancel","message":"not that file"}
type JSONAnswer struct {
	AnswerTo     string          `json:"answerTo"`
	InvocationID string          `json:"invocationId,omitempty"`
	Outcome      events.Outcome  `json:"outcome"`
	Args         json.RawMessage `json:"args,omitempty"`
	Message      string          `json:"message,omitempty"`
}

// RunJSON is the approver for scripts: it prints every request and every
// change to one (answered, rejected, closed) as a JSON line on out, and
// sends each answer line read from in, printing the executor's ack. A
// line that is not an answer gets an error line, and reading goes on. It
// returns at the end of in, once the answers read are acknowledged, or
// when ctx ends.
//
// The line reader blocks in in.Read and so ends with in: the caller owns
// in and closes it (the process's stdin ends with the process).
func RunJSON(ctx context.Context, seat Seat, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &lineWriter{enc: json.NewEncoder(out)}
	w.write(JSONEvent{Event: "ready", Approver: seat.Identity().ID})
	watched := make(chan error, 1)
	go func() { watched <- watch(ctx, seat, w) }()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()

	n := 0
	for {
		select {
		case <-ctx.Done():
			return <-watched
		case err := <-watched:
			return err
		case line, ok := <-lines:
			if !ok {
				cancel()
				err := <-watched
				select {
				case rerr := <-readErr:
					err = errors.Join(err, rerr)
				default:
				}
				return err
			}
			n++
			if len(line) == 0 {
				continue
			}
			answerLine(ctx, seat, w, n, line)
		}
	}
}

func answerLine(ctx context.Context, seat Seat, w *lineWriter, n int, line []byte) {
	var a JSONAnswer
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		w.write(JSONEvent{Event: "error", Line: n, Error: "not an answer: " + err.Error()})
		return
	}
	switch {
	case a.AnswerTo == "":
		w.write(JSONEvent{Event: "error", Line: n, InvocationID: a.InvocationID,
			Error: "answerTo is empty: name the request by the answerTo of its request line; an invocation id does not name one, since another request may share it"})
		return
	case !a.Outcome.Valid():
		w.write(JSONEvent{Event: "error", Line: n, AnswerTo: a.AnswerTo, InvocationID: a.InvocationID, Error: fmt.Sprintf("unknown outcome %q", a.Outcome)})
		return
	}
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	ack, err := seat.Answer(ctx, a.AnswerTo, approve.Answer{Outcome: a.Outcome, Args: a.Args, Message: a.Message})
	if err != nil {
		w.write(JSONEvent{Event: "error", Line: n, AnswerTo: a.AnswerTo, InvocationID: a.InvocationID, Error: err.Error()})
		return
	}
	w.write(JSONEvent{Event: "ack", AnswerTo: a.AnswerTo, InvocationID: ack.InvocationID, Accepted: &ack.Accepted, Reason: ack.Reason, Approval: ack.Approval, Of: ack.Of})
}

// watch prints the queue's changes until ctx ends.
func watch(ctx context.Context, seat Seat, w *lineWriter) error {
	// Each is keyed by round: a modified call may be asked about again.
	printed := map[string]bool{}   // requests printed
	ended := map[string]bool{}     // endings printed
	rejections := map[string]int{} // rejections printed, per request
	down := false                  // a disconnected line was the last said of the connection
	for {
		state, changed := seat.Snapshot()
		for _, r := range state.Pending {
			if k := round(r); !printed[k] {
				printed[k] = true
				req, deadline := r.ConfirmRequest, r.Deadline
				w.write(JSONEvent{Event: "request", AnswerTo: r.AnswerTo, InvocationID: r.InvocationID, Request: &req, Deadline: &deadline})
			}
		}
		for _, list := range [][]approve.Request{state.Pending, state.Recent} {
			for _, r := range list {
				k := round(r)
				for _, rej := range r.Rejected[min(rejections[k], len(r.Rejected)):] {
					w.write(JSONEvent{Event: "rejected", AnswerTo: r.AnswerTo, InvocationID: r.InvocationID, By: rej.Answer.Sender.ID,
						Outcome: rej.Answer.Outcome, Reason: rej.Reason})
				}
				rejections[k] = len(r.Rejected)
			}
		}
		// Recent is newest first; endings are printed oldest first.
		for i := len(state.Recent) - 1; i >= 0; i-- {
			r := state.Recent[i]
			k := round(r)
			if ended[k] || !printed[k] {
				continue
			}
			ended[k] = true
			switch {
			case r.Answer != nil:
				w.write(JSONEvent{Event: "answered", AnswerTo: r.AnswerTo, InvocationID: r.InvocationID, By: r.Answer.Sender.ID, Outcome: r.Answer.Outcome})
			case r.Closed != nil:
				w.write(JSONEvent{Event: "closed", AnswerTo: r.AnswerTo, InvocationID: r.InvocationID, ErrorType: string(r.Closed.ErrorType), Reason: r.Closed.Reason})
			}
		}
		if !waitChange(ctx, seat, w, changed, &down) {
			return nil
		}
	}
}

// connectionCheck is how often the JSON approver looks at its connection
// to the bus.
const connectionCheck = time.Second

// waitChange waits for the seat's state to change, printing a
// disconnected or reconnected line when the seat's connection to the bus
// goes or comes back meanwhile; false when ctx ends. down is whether the
// last line printed said disconnected.
func waitChange(ctx context.Context, seat Seat, w *lineWriter, changed <-chan struct{}, down *bool) bool {
	t := time.NewTicker(connectionCheck)
	defer t.Stop()
	for {
		select {
		case <-changed:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
			isDown := !seat.Connected()
			switch {
			case isDown && !*down:
				w.write(JSONEvent{Event: "disconnected", Reason: "the connection to the bus is down: no request arrives and no answer is sent until it is back"})
			case !isDown && *down:
				w.write(JSONEvent{Event: "reconnected"})
			}
			*down = isDown
		}
	}
}

// lineWriter writes whole JSON lines from several goroutines.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *lineWriter) write(e JSONEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(e); err != nil {
		// A request whose arguments are not JSON is still reported, so
		// that a script does not wait for a line that never comes; when
		// the output itself is gone there is nobody left to tell.
		w.enc.Encode(JSONEvent{Event: "error", AnswerTo: e.AnswerTo, InvocationID: e.InvocationID, //nolint:errcheck
			Error: fmt.Sprintf("the %s event does not encode: %v", e.Event, err)})
	}
}
