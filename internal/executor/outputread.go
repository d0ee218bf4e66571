package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// Reading stored outputs for their owners (events/output.go has the
// protocol). Agents may not read the object store: an executor reads it
// for them and gives an output only to the principal that owns it.

// outputChunk is how many bytes of an output one message carries: well
// under the default max payload, so a reader on a bus with a smaller one
// still gets them.
const outputChunk = 128 << 10

// outputReadsAtOnce bounds the reads an executor serves at once; a read
// beyond them waits its turn.
const outputReadsAtOnce = 16

// outputReadsPerPrincipal bounds the reads one principal may have served
// or waiting at an executor; one more is refused at once. A reader that
// asks and never reads cannot hold every slot, nor queue without end.
const outputReadsPerPrincipal = 4

// outputReaderWait is how long an executor waits for a reader to take a
// window before it gives the read up.
const outputReaderWait = 30 * time.Second

// outputMeta names an output stored for owner, a principal.
func outputMeta(name, owner string) jetstream.ObjectMeta {
	return jetstream.ObjectMeta{Name: name, Metadata: map[string]string{events.OutputOwnerKey: owner}}
}

// mayRead says whether principal may read an output of owner: its own, or
// any when the request is unproven, which in a fleet only an admin or the
// bus may send (without identities nothing is proven, and every output is
// anyone's, as every call is).
func mayRead(principal, owner string) bool {
	return principal == events.Unproven || principal == owner
}

// handleOutputRead takes a request for a stored output.
func (e *Executor) handleOutputRead(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	req, err := events.Decode[events.OutputRequest](m.Data)
	if err != nil {
		e.failRead(m.Reply, "malformed output request: "+err.Error())
		endAnswers(e.nc, m.Reply)
		return
	}
	principal := e.principalOf(m, false)
	e.mu.Lock()
	select {
	case <-e.stopping:
		e.mu.Unlock()
		e.failRead(m.Reply, errShutdown.Error())
		return
	default:
	}
	if e.readers[principal] >= outputReadsPerPrincipal {
		e.mu.Unlock()
		e.failRead(m.Reply, fmt.Sprintf("%d reads of yours are served or waiting already: finish one first", outputReadsPerPrincipal))
		endAnswers(e.nc, m.Reply)
		return
	}
	e.readers[principal]++
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		defer func() {
			e.mu.Lock()
			if e.readers[principal]--; e.readers[principal] == 0 {
				delete(e.readers, principal)
			}
			e.mu.Unlock()
		}()
		select {
		case e.reads <- struct{}{}:
			defer func() { <-e.reads }()
		case <-e.stopping:
			e.failRead(m.Reply, errShutdown.Error())
			return
		}
		// The end goes the way the last message went: the chunks and
		// their end over the bulk connection, a failure over the other.
		if reason := e.sendOutput(m.Reply, principal, req.Name); reason != "" {
			e.failRead(m.Reply, reason)
			endAnswers(e.nc, m.Reply)
		} else {
			endAnswers(e.bulk, m.Reply)
		}
	}()
}

// handleOutputAnswer takes a reader's answer to a window and hands it
// to its read, if the read is of the principal that answers.
func (e *Executor) handleOutputAnswer(m *nats.Msg) {
	token := m.Header.Get(events.OutputReadHeader)
	// toolbus.output.<principal>.answer.<executor>, the principal one
	// token or two (a client of a facade).
	principal := events.Unproven
	if e.cfg.IdentitiesEnforced {
		if i := strings.LastIndex(m.Subject, ".answer."); i >= 0 {
			if p, ok := events.SubjectPrincipal(m.Subject[:i]); ok {
				principal = p
			}
		}
	}
	e.mu.Lock()
	r := e.readsByToken[token]
	e.mu.Unlock()
	if r == nil || r.principal != principal {
		return
	}
	select {
	case r.answers <- string(m.Data):
	default:
	}
}

// outputRead is a read being served, as its reader's answers find it.
type outputRead struct {
	principal string
	answers   chan string
}

// sendOutput streams output name to reply, window by window, and says
// why it failed ("" when it did not).
func (e *Executor) sendOutput(reply, principal, name string) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	obj, err := e.outputs.Get(ctx, events.OutputObjectName(name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return events.OutputNotYours
	}
	if err != nil {
		return "the output store: " + err.Error()
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return "the output store: " + err.Error()
	}
	if !mayRead(principal, info.Metadata[events.OutputOwnerKey]) {
		e.log.Warn("an output read refused: the output is another's", "principal", principal, "output", name)
		return events.OutputNotYours
	}
	// Outputs go over the bulk connection, as they are stored, so that a
	// large one does not hold up the calls' messages. The reader's
	// answers find the read by its token (handleOutputAnswer), which
	// steers the read: one nobody can guess.
	token := events.NewCapability()
	read := &outputRead{principal: principal, answers: make(chan string, 2)}
	e.mu.Lock()
	e.readsByToken[token] = read
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.readsByToken, token)
		e.mu.Unlock()
	}()

	buf := make([]byte, outputChunk)
	for seq := 1; ; seq++ {
		n, err := io.ReadFull(obj, buf)
		if n > 0 {
			// A reader that stops early may say so at any chunk; it
			// answers the last of a window to go on.
			select {
			case <-read.answers:
				return "the reader stopped"
			default:
			}
			m := &nats.Msg{Subject: reply, Data: buf[:n], Header: nats.Header{
				events.OutputHeader: {events.OutputChunk}, events.OutputSeqHeader: {strconv.Itoa(seq)},
				events.OutputReadHeader: {token}, events.ExecutorHeader: {e.id.ID}}}
			if perr := e.bulk.PublishMsg(m); perr != nil {
				return "the chunk was not sent: " + perr.Error()
			}
			if seq%events.OutputWindow == 0 {
				if reason := e.awaitReader(read.answers); reason != "" {
					return reason
				}
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			// The reader checks the digest at the end: a corrupt
			// output fails here.
			return "the output store: " + err.Error()
		}
	}
	done, _ := json.Marshal(events.OutputDone{Size: info.Size})
	if err := e.bulk.PublishMsg(&nats.Msg{Subject: reply, Data: done, Header: nats.Header{events.OutputHeader: {events.OutputEnd}}}); err != nil {
		e.log.Warn("the end of an output read was not sent", "output", name, "err", err)
	}
	return ""
}

// awaitReader waits for the reader to take a window: "" to go on, else
// why the read ends.
func (e *Executor) awaitReader(answers <-chan string) string {
	t := time.NewTimer(outputReaderWait)
	defer t.Stop()
	select {
	case a := <-answers:
		if a == events.OutputMore {
			return ""
		}
		return "the reader stopped"
	case <-t.C:
		return "the reader took nothing for " + outputReaderWait.String()
	case <-e.stopping:
		return errShutdown.Error()
	}
}

// failRead ends a read with reason.
func (e *Executor) failRead(reply, reason string) {
	m := &nats.Msg{Subject: reply, Data: []byte(reason), Header: nats.Header{events.OutputHeader: {events.OutputFailed}}}
	if err := e.nc.PublishMsg(m); err != nil {
		e.log.Warn("the failure of an output read was not sent", "err", err)
	}
}
