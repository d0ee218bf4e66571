package executor

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// outputStore is where an executor keeps whole outputs, and serves them to
// their owners.
type outputStore struct {
	outputs jetstream.ObjectStore // over bulk
	bulk    *nats.Conn            // the connection whole outputs take
	storing *semaphore.Weighted   // bytes on their way to outputs
	reads   chan struct{}         // a token for each output read being served
	// Under Executor.mu: the reads served or waiting, by principal, and
	// those served, by token (outputread.go).
	readers      map[string]int
	readsByToken map[string]*outputRead
}

// What keeps results within what the bus carries: capOutput caps every
// result at MaxContent characters, fit cuts further what still does not
// fit in one message, and both keep the whole output in the object store
// when they can, and say why not when they cannot. The whole output is
// streamed to the store, from the tool's spool when it has one, so a call
// never holds more than its head in memory.

// storeInFlight bounds the bytes this executor has on their way to the
// object store at once. JetStream queues what comes in for a stream in
// memory, up to 128 MiB by default, and refuses more with status 429:
// 64 outputs of 20 MB stored at once overflowed it. Half of that queue
// leaves room for another executor storing at the same time; an output
// larger than the budget takes all of it and goes alone.
const storeInFlight = 64 << 20

// storeBudget is how long keeping one whole output may take, waiting for
// room and retrying a busy store included. The call's caller keeps
// hearing heartbeats meanwhile.
const storeBudget = 30 * time.Second

// output is what keepWhole stores: a fresh reader for each try, and how
// many bytes it gives. *tool.Spool is one.
type output interface {
	Reader() io.Reader
	Size() int64
}

// text is an output held in memory.
type text string

func (t text) Reader() io.Reader { return strings.NewReader(string(t)) }
func (t text) Size() int64       { return int64(len(t)) }

// capOutput keeps llmContent and returnDisplay within MaxContent
// characters. The whole llmContent, which is whole when the tool spooled
// it, goes to the object store under the invocation id; if it cannot, the
// result is capped all the same and says why the whole is not kept.
func (e *Executor) capOutput(ctx context.Context, owner string, res *events.Result, whole *tool.Spool) {
	limit := e.cfg.MaxContent
	if res.Error != nil && len(res.Error.Message) > limit {
		res.Error.Message = truncate(res.Error.Message, limit) + " [message truncated]"
	}
	if whole != nil && whole.Size() <= int64(limit)*utf8.UTFMax {
		// Small enough to look at in memory, as any other output.
		if s, err := whole.Head(int(whole.Size())); err == nil {
			res.LLMContent, whole = s, nil
		}
	}
	var src output = text(res.LLMContent)
	if whole != nil {
		if head, err := whole.Head(limit * utf8.UTFMax); err == nil {
			res.LLMContent = head
		}
		src = whole
	} else if fits(res.LLMContent, limit) && fits(res.ReturnDisplay, limit) {
		return
	}
	total, err := e.keepWhole(ctx, owner, res, src)
	note := fmt.Sprintf("\n\n[Output truncated: showing %d of %d characters. The whole output is in the object store at %s; `toolbus output %s` writes it.]",
		limit, total, res.OutputRef, events.OutputObjectName(res.OutputRef))
	if err != nil {
		note = fmt.Sprintf("\n\n[Output truncated: showing %d of %d characters. The whole output could not be kept: %s.]", limit, total, storeFailure(err))
	}
	res.Truncated = true
	res.LLMContent = truncate(res.LLMContent, limit) + note
	res.ReturnDisplay = truncate(res.ReturnDisplay, limit)
}

// capStructured keeps an MCP tool's structuredContent within MaxContent
// characters, as capOutput keeps the text. A JSON value cut short is no
// longer JSON, so one larger is never cut: it goes whole to the object
// store, StructuredRef names it, and LLMContent says so, or why it could
// not be kept.
func (e *Executor) capStructured(ctx context.Context, owner string, res *events.Result) {
	data := res.StructuredContent
	if len(data) <= e.cfg.MaxContent || utf8.RuneCount(data) <= e.cfg.MaxContent {
		return
	}
	res.LLMContent += e.storeStructured(ctx, owner, res)
}

// storeStructured moves res's structuredContent to the object store and
// returns the note that says where it is, or why it is not kept.
func (e *Executor) storeStructured(ctx context.Context, owner string, res *events.Result) string {
	sized := &events.Result{InvocationID: res.InvocationID + ".structured"}
	n, err := e.keepWhole(ctx, owner, sized, text(res.StructuredContent))
	res.StructuredContent = nil
	if err != nil {
		return fmt.Sprintf("\n\n[The structuredContent, %d characters, is too large for the result and could not be kept: %s.]", n, storeFailure(err))
	}
	res.StructuredRef = sized.OutputRef
	return fmt.Sprintf("\n\n[The structuredContent, %d characters, is too large for the result; it is in the object store at %s.]", n, res.StructuredRef)
}

// maxInlineParts is how many bytes of typed parts (an MCP tool's images,
// audio, blobs, and the text of a result kept block by block) a result
// carries itself; beyond it, parts go to the object store, largest first,
// and the result names where (Part.Ref).
// Well under the default max payload of 1 MB, so that a screenshot does
// not make a result that cannot be sent.
const maxInlineParts = 256 << 10

// storeParts moves the data of res's largest parts to the object store
// until what is left inline fits maxInlineParts (or the bus's max
// payload, when smaller). A part that cannot be stored is dropped, and
// the result says so: a result that cannot be sent would lose everything.
func (e *Executor) storeParts(ctx context.Context, owner string, res *events.Result) {
	limit := min(maxInlineParts, int(e.nc.MaxPayload())/4)
	total := 0
	for _, p := range res.Parts {
		total += len(p.Data) + len(p.Text)
	}
	if total <= limit {
		return
	}
	order := make([]int, len(res.Parts))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		pa, pb := &res.Parts[order[a]], &res.Parts[order[b]]
		return len(pa.Data)+len(pa.Text) > len(pb.Data)+len(pb.Text)
	})
	var dropped []string
	for _, i := range order {
		if total <= limit {
			break
		}
		p := &res.Parts[i]
		data, isText := p.Data, false
		if data == "" {
			data, isText = p.Text, true
		}
		if data == "" {
			continue
		}
		name := fmt.Sprintf("%s.part%d", res.InvocationID, i)
		sized := &events.Result{InvocationID: name}
		if _, err := e.keepWhole(ctx, owner, sized, text(data)); err != nil {
			dropped = append(dropped, fmt.Sprintf("part %d (%s %s, %d bytes): %s", i, p.Type, p.MIMEType, len(data), storeFailure(err)))
			p.Ref = ""
		} else {
			p.Ref, p.RefText = sized.OutputRef, isText
		}
		p.Size, p.Data, p.Text = len(data), "", ""
		total -= len(data)
	}
	if len(dropped) > 0 {
		res.LLMContent += "\n\n[Parts too large for the result could not be kept: " + strings.Join(dropped, "; ") + ".]"
		kept := res.Parts[:0]
		for _, p := range res.Parts {
			if p.Ref != "" || p.Data != "" || p.Text != "" {
				kept = append(kept, p)
			}
		}
		res.Parts = kept
	}
}

// fits reports whether s has at most limit characters.
func fits(s string, limit int) bool {
	// Fewer bytes than the limit means fewer characters too.
	return len(s) <= limit || utf8.RuneCountInString(s) <= limit
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

// keepWhole stores out, the whole llmContent of res, in the object store
// under the invocation id and records where in OutputRef. It returns how
// many characters out has, counted as it streams by (or afterwards, when
// storing failed).
//
// Storing waits for its share of storeInFlight, so that the executor's
// calls together never have more in flight than the store takes, and
// tries again, backing off, while the store answers that it is busy
// (429), within storeBudget.
func (e *Executor) keepWhole(ctx context.Context, owner string, res *events.Result, out output) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeBudget)
	defer cancel()
	size := out.Size()
	weight := min(size, storeInFlight)
	err := e.storing.Acquire(ctx, weight)
	if err != nil {
		err = fmt.Errorf("no room to store it within %s: %w", storeBudget, err)
	} else {
		defer e.storing.Release(weight)
	}
	// Ids are the callers' choice: another principal's output stored
	// under this one stays, and this one goes beside it, under a name
	// nobody can guess (the read checks the owner all the same).
	name := res.InvocationID
	if err == nil {
		if info, ierr := e.outputs.GetInfo(ctx, name); ierr == nil && info.Metadata[events.OutputOwnerKey] != owner {
			name += "." + events.NewCapability()
		}
	}
	tried := false
	for wait := 50 * time.Millisecond; err == nil; wait = min(2*wait, 2*time.Second) {
		tried = true
		r := &runeCounter{r: out.Reader()}
		if _, err = e.outputs.Put(ctx, outputMeta(name, owner), r); err == nil {
			res.OutputRef = events.OutputBucket + "/" + name
			return r.n, nil
		}
		if !storeBusy(err) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			err = fmt.Errorf("%w, still after %s", err, storeBudget)
		case <-t.C:
			err = nil
		}
	}
	e.log.Error("whole output not stored", "invocation", res.InvocationID, "bytes", size, "err", err)
	if tried {
		e.dropPartial(name)
	}
	r := &runeCounter{r: out.Reader()}
	io.Copy(io.Discard, r)
	return r.n, err
}

// dropPartial removes what a failed Put may have left of object name.
// nats.go purges the chunks of a Put that failed, but publishes the
// object's meta message without waiting for the chunks' acks: when the
// store refused a chunk (full) and then took the small meta message, an
// object stays that names chunks that are gone, and one whose Put ran out
// of time keeps its chunks too. Both would read as a broken output.
func (e *Executor) dropPartial(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, "OBJ_"+events.OutputBucket)
	if err != nil {
		e.log.Warn("partial output not removed", "invocation", name, "err", err)
		return
	}
	// The subjects are those of the object store's layout (ADR-20):
	// $O.<bucket>.M.<name, base64url> for the meta message and
	// $O.<bucket>.C.<nuid> for the chunks it names.
	meta := fmt.Sprintf("$O.%s.M.%s", events.OutputBucket, base64.URLEncoding.EncodeToString([]byte(name)))
	if info, err := e.outputs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted()); err == nil && info.NUID != "" {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("$O.%s.C.%s", events.OutputBucket, info.NUID)))
		if err != nil {
			e.log.Warn("partial output's chunks not removed", "invocation", name, "err", err)
		}
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(meta)); err != nil {
		e.log.Warn("partial output not removed", "invocation", name, "err", err)
	}
}

// runeCounter counts the characters of UTF-8 text read through it: every
// byte that does not continue a character starts one, so chunks may cut
// characters anywhere.
type runeCounter struct {
	r io.Reader
	n int64
}

func (c *runeCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for _, b := range p[:n] {
		if b&0xC0 != 0x80 {
			c.n++
		}
	}
	return n, err
}

// storeBusy reports whether the object store refused because too much was
// coming in at once, which passes.
func storeBusy(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 429
	}
	return errors.Is(err, jetstream.ErrTooManyStalledMsgs)
}

// storeFailure says, for a person, why an output was not stored.
func storeFailure(err error) string {
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && (strings.Contains(api.Description, "maximum bytes exceeded") || strings.Contains(api.Description, "insufficient resources")):
		return fmt.Sprintf("the object store %s is full (%s); older outputs make room as they expire", events.OutputBucket, api.Description)
	case storeBusy(err):
		return fmt.Sprintf("the object store %s stayed too busy (%v)", events.OutputBucket, err)
	}
	return err.Error()
}

// fit encodes env, which holds results, so that it fits in one message.
// A result capped at MaxContent characters fits on a bus with the default
// max payload, but a batch of them may not, nor one result on a bus
// configured with a smaller one: then the longest outputs are cut to a
// share of the room, each kept whole in the object store first and
// referenced, as a capped result is.
func (e *Executor) fit(owner string, env events.Envelope, results []*events.Result) ([]byte, error) {
	limit := e.maxRecord()
	data, err := events.Encode(env)
	for round := 0; err == nil && len(data) > limit && round < 8; round++ {
		// Share the room the outputs have left, halving it each round in
		// case escaping makes the encoded text longer than the text.
		content := 0
		for _, r := range results {
			content += len(r.LLMContent) + len(r.ReturnDisplay) + len(r.StructuredContent)
		}
		share := max((limit-(len(data)-content))/len(results)>>round, 256)
		for _, r := range results {
			e.cutResult(owner, r, share)
		}
		data, err = events.Encode(env)
	}
	if err == nil && len(data) > limit {
		err = fmt.Errorf("%s is %d bytes even with every output cut", env.EnvelopeType(), len(data))
	}
	return data, err
}

// maxRecord is the largest event the executor sends: the bus's limit,
// less room for the protocol and headers.
func (e *Executor) maxRecord() int { return int(e.nc.MaxPayload()) - 8<<10 }

// cutResult cuts r's outputs to share bytes between them, keeping the
// whole llmContent in the object store unless it is there already. A
// structuredContent that takes them past share goes to the store whole
// first (storeStructured; StructuredRef says where, should the cut take
// the note that says so).
func (e *Executor) cutResult(owner string, r *events.Result, share int) {
	if len(r.StructuredContent) > 0 && len(r.LLMContent)+len(r.ReturnDisplay)+len(r.StructuredContent) > share {
		r.LLMContent += e.storeStructured(context.Background(), owner, r)
	}
	if len(r.LLMContent)+len(r.ReturnDisplay) <= share {
		return
	}
	if r.OutputRef == "" {
		e.keepWhole(context.Background(), owner, r, text(r.LLMContent))
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
