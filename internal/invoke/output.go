package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// ErrNoOutput: no stored output of that name is the reader's (it is not
// there, it expired, or it is another principal's).
var ErrNoOutput = errors.New("no stored output")

// outputIdleWait is how long a reader waits for the next message of a
// read before it takes the executor for gone.
const outputIdleWait = 30 * time.Second

// ReadOutput returns the whole stored output name (an invocation id, a
// Result's OutputRef or a Part's Ref), which an executor reads from the
// object store for this client's principal. Close the reader; closing it
// early ends the read.
func (c *Client) ReadOutput(ctx context.Context, name string) (io.ReadCloser, error) {
	name = events.OutputObjectName(name)
	data, err := events.Encode(&events.OutputRequest{Header: events.Header{Sender: c.id}, Name: name})
	if err != nil {
		return nil, fmt.Errorf("read output %q: %w", name, err)
	}
	// Room for a window and its end: a reader that lags pauses the
	// executor, and the server never drops a chunk for want of room.
	r := &outputReader{c: c, name: name, msgs: make(chan *nats.Msg, events.OutputWindow+2)}
	r.ctx, r.cancel = context.WithCancel(ctx)
	if r.sub, err = c.nc.ChanSubscribe(c.nc.NewInbox(), r.msgs); err != nil {
		r.cancel()
		return nil, fmt.Errorf("read output %q: %w", name, err)
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: events.OutputSubject(c.principal), Reply: r.sub.Subject, Data: data}); err != nil {
		r.Close()
		return nil, fmt.Errorf("read output %q: %w", name, err)
	}
	// The first message says whether there is anything to read.
	if err := r.next(); err != nil && err != io.EOF {
		r.Close()
		return nil, err
	}
	return r, nil
}

// outputReader reads an output as its executor sends it.
type outputReader struct {
	c      *Client
	name   string
	sub    *nats.Subscription
	msgs   chan *nats.Msg
	ctx    context.Context
	cancel context.CancelFunc

	chunk []byte    // what is left of the current chunk
	last  *nats.Msg // the current chunk, to answer when the reader stops
	ack   *nats.Msg // the chunk to answer once it is read, ending a window
	seq   int       // the last chunk's number
	got   uint64    // bytes received
	err   error     // io.EOF once the output is whole
}

// next takes the next message of the read into r.chunk, or ends it.
func (r *outputReader) next() error {
	if r.ack != nil {
		// The window is read: the executor may send the next.
		if err := r.answer(r.ack, events.OutputMore); err != nil {
			return r.fail(fmt.Errorf("read output %q: %w", r.name, err))
		}
		if r.last == r.ack {
			r.last = nil // answered: a chunk is answered once
		}
		r.ack = nil
	}
	t := time.NewTimer(outputIdleWait)
	defer t.Stop()
	var m *nats.Msg
	select {
	case m = <-r.msgs:
	case <-r.ctx.Done():
		return r.fail(fmt.Errorf("read output %q: %w", r.name, r.ctx.Err()))
	case <-t.C:
		return r.fail(fmt.Errorf("read output %q: nothing from the executor for %s", r.name, outputIdleWait))
	}
	if m.Header.Get("Status") == "503" {
		return r.fail(fmt.Errorf("read output %q: %w", r.name, ErrNoExecutor))
	}
	switch m.Header.Get(events.OutputHeader) {
	case events.OutputChunk:
		seq, _ := strconv.Atoi(m.Header.Get(events.OutputSeqHeader))
		if seq != r.seq+1 {
			return r.fail(fmt.Errorf("read output %q: chunk %d came after chunk %d", r.name, seq, r.seq))
		}
		r.seq, r.chunk, r.last = seq, m.Data, m
		r.got += uint64(len(m.Data))
		if seq%events.OutputWindow == 0 {
			r.ack = m
		}
		return nil
	case events.OutputEnd:
		var done events.OutputDone
		if err := json.Unmarshal(m.Data, &done); err != nil {
			return r.fail(fmt.Errorf("read output %q: the end of the read: %w", r.name, err))
		}
		if done.Size != r.got {
			return r.fail(fmt.Errorf("read output %q: %d bytes of %d came", r.name, r.got, done.Size))
		}
		return r.fail(io.EOF)
	case events.OutputFailed:
		if string(m.Data) == events.OutputNotYours {
			return r.fail(fmt.Errorf("%w: %s", ErrNoOutput, r.name))
		}
		return r.fail(fmt.Errorf("read output %q: %s", r.name, m.Data))
	}
	return r.fail(fmt.Errorf("read output %q: a message that is no part of a read", r.name))
}

// answer answers the window chunk m ends, at the executor that sent it.
func (r *outputReader) answer(m *nats.Msg, answer string) error {
	return r.c.nc.PublishMsg(&nats.Msg{Subject: events.OutputAnswerSubject(r.c.principal, m.Header.Get(events.ExecutorHeader)),
		Header: nats.Header{events.OutputReadHeader: {m.Header.Get(events.OutputReadHeader)}}, Data: []byte(answer)})
}

// fail ends the read with err and returns it.
func (r *outputReader) fail(err error) error {
	r.err = err
	r.sub.Unsubscribe()
	return err
}

func (r *outputReader) Read(p []byte) (int, error) {
	for len(r.chunk) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.chunk)
	r.chunk = r.chunk[n:]
	return n, nil
}

// Close ends the read; the executor sending it hears it stop.
func (r *outputReader) Close() error {
	if r.err == nil && r.last != nil {
		r.answer(r.last, events.OutputStop)
	}
	if r.err == nil {
		r.fail(errors.New("read output: closed"))
	}
	r.cancel()
	return nil
}
