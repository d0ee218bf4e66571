package executor

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/events"
)

// What keeps results within what the bus carries: capOutput caps every
// result at MaxContent characters, fit cuts further what still does not
// fit in one message, and both keep the whole output in the object store.

// capOutput keeps llmContent and returnDisplay within MaxContent characters;
// the whole output goes to the object store under the invocation id, so no
// result exceeds what the bus carries.
func (e *Executor) capOutput(ctx context.Context, res *events.Result) {
	limit := e.cfg.MaxContent
	if res.Error != nil && len(res.Error.Message) > limit {
		res.Error.Message = truncate(res.Error.Message, limit) + " [message truncated]"
	}
	if len(res.LLMContent) <= limit && len(res.ReturnDisplay) <= limit {
		return // fewer bytes than the limit means fewer characters too
	}
	if utf8.RuneCountInString(res.LLMContent) <= limit && utf8.RuneCountInString(res.ReturnDisplay) <= limit {
		return
	}
	ref, err := e.keepWhole(ctx, res)
	total := utf8.RuneCountInString(res.LLMContent)
	note := fmt.Sprintf("\n\n[Output truncated: showing %d of %d characters. The whole output is in the object store at %s.]", limit, total, ref)
	if err != nil {
		note = fmt.Sprintf("\n\n[Output truncated: showing %d of %d characters; storing the whole output failed: %v]", limit, total, err)
	}
	res.Truncated = true
	res.LLMContent = truncate(res.LLMContent, limit) + note
	res.ReturnDisplay = truncate(res.ReturnDisplay, limit)
}

// truncate cuts s to at most n characters.
func truncate(s string, n int) string {
	i := 0
	for range n {
		if i >= len(s) {
			return s
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// keepWhole stores res's whole llmContent in the object store under the
// invocation id, before the result is cut, and records where in OutputRef.
func (e *Executor) keepWhole(ctx context.Context, res *events.Result) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := e.outputs.PutString(ctx, res.InvocationID, res.LLMContent); err != nil {
		e.log.Error("whole output not stored", "invocation", res.InvocationID, "err", err)
		return "", err
	}
	res.OutputRef = events.OutputBucket + "/" + res.InvocationID
	return res.OutputRef, nil
}

// fit encodes env, which holds results, so that it fits in one message.
// A result capped at MaxContent characters fits on a bus with the default
// max payload, but a batch of them may not, nor one result on a bus
// configured with a smaller one: then the longest outputs are cut to a
// share of the room, each kept whole in the object store first and
// referenced, as a capped result is.
func (e *Executor) fit(env events.Envelope, results []*events.Result) ([]byte, error) {
	limit := int(e.nc.MaxPayload()) - 8<<10 // room for the protocol and headers
	data, err := events.Encode(env)
	for round := 0; err == nil && len(data) > limit && round < 8; round++ {
		// Share the room the outputs have left, halving it each round in
		// case escaping makes the encoded text longer than the text.
		content := 0
		for _, r := range results {
			content += len(r.LLMContent) + len(r.ReturnDisplay)
		}
		share := max((limit-(len(data)-content))/len(results)>>round, 256)
		for _, r := range results {
			e.cutResult(r, share)
		}
		data, err = events.Encode(env)
	}
	if err == nil && len(data) > limit {
		err = fmt.Errorf("%s is %d bytes even with every output cut", env.EnvelopeType(), len(data))
	}
	return data, err
}

// cutResult cuts r's outputs to share bytes between them, keeping the
// whole llmContent in the object store unless it is there already.
func (e *Executor) cutResult(r *events.Result, share int) {
	if len(r.LLMContent)+len(r.ReturnDisplay) <= share {
		return
	}
	if r.OutputRef == "" {
		e.keepWhole(context.Background(), r)
	}
	ref := r.OutputRef
	note := cutNote + "; storing the whole output failed.]"
	if ref != "" {
		note = cutNote + ". The whole output is in the object store at " + ref + ".]"
	}
	if i := strings.LastIndex(r.LLMContent, cutNote); i >= 0 {
		r.LLMContent = r.LLMContent[:i] // cut in an earlier round
	}
	r.Truncated = true
	r.LLMContent = truncateBytes(r.LLMContent, share*3/4) + note
	r.ReturnDisplay = truncateBytes(r.ReturnDisplay, share/4)
}

const cutNote = "\n\n[Output cut to fit one message"

// truncateBytes cuts s to at most n bytes, on a character boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// batchClient is the executor's own client for the calls of batches.
func (e *Executor) batchClient() *Client {
	e.invokerOnce.Do(func() { e.invoker = NewClient(e.nc, e.id) })
	return e.invoker
}
