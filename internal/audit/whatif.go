package audit

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// WhatIf is what another policy would have decided about recorded calls.
type WhatIf struct {
	// Revision is the revision of the policy the calls were judged under
	// again.
	Revision string `json:"revision"`
	// Invocations counts the invocations selected; Replayed those whose
	// decision was judged again; Unchanged those of them the other policy
	// decides alike (verdict and reason).
	Invocations int `json:"invocations"`
	Replayed    int `json:"replayed"`
	Unchanged   int `json:"unchanged"`
	// SameVerdict counts the replayed decisions whose verdict stays and
	// whose reason changes.
	SameVerdict int `json:"sameVerdictOtherReason"`
	// NotJudged counts invocations with no decision recorded with its
	// input: the policy never judged them (an unknown tool, invalid
	// arguments, a call lost before its executor took it), or they were
	// recorded before decisions kept their inputs.
	NotJudged int `json:"notJudged"`
	// Lossy counts replayed decisions whose input held a string that was
	// not UTF-8 (see policy.Recorded.Lossy).
	Lossy int `json:"lossy,omitempty"`
	// Failed are the recorded decisions that could not be judged again,
	// and why: a damaged record is reported, never taken as a verdict.
	Failed []Failure `json:"failed,omitempty"`
	// Changes are the decisions whose verdict would change, by change
	// (ALLOW→DENY, ...) then in invocation order.
	Changes []Change `json:"changes,omitempty"`
	Stats   Stats    `json:"-"`
}

// Failure is a recorded decision a replay could not judge.
type Failure struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Change is one invocation the other policy would decide differently.
type Change struct {
	From   events.Verdict `json:"from"`
	To     events.Verdict `json:"to"`
	Reason string         `json:"reason"`
	// Record is the call as recorded; its Verdict and Reason are the
	// recorded decision's.
	Record *Record `json:"call"`
}

// RunWhatIf judges again, under pol, every invocation q selects that has
// a decision recorded with its input, and reports the decisions that
// would change. Nothing is executed: a replay evaluates the policy on the
// recorded input, and at most shows a shell line to bash's parser (which
// reads it without running it), as the executor would have before
// allowing it. Decisions are judged on all cores while the stream is
// still being read.
func RunWhatIf(ctx context.Context, js jetstream.JetStream, q Query, pol *policy.Policy) (*WhatIf, error) {
	type job struct {
		r  *Record
		jc *judgedCall
	}
	start := time.Now()
	jobs := make(chan job, 1024)
	var wg sync.WaitGroup
	m := newMemo(pol)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for jb := range jobs {
				jb.jc.replayed, jb.jc.err = m.replay(ctx, pol, jb.r, jb.jc.d)
				jb.jc.d.Input = nil // judged: the memory can go
			}
		})
	}
	j := newJoiner(q, false)
	j.judged = func(r *Record, jc *judgedCall) { jobs <- job{r, jc} }
	recs, st, err := read(ctx, js, Subjects, j)
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	w := &WhatIf{Revision: pol.Revision(), Invocations: len(recs), Stats: st}
	for _, r := range recs {
		jc := r.decision()
		switch {
		case jc == nil:
			w.NotJudged++
			continue
		case jc.err != nil:
			w.Failed = append(w.Failed, Failure{ID: r.ID, Reason: jc.err.Error()})
			continue
		}
		w.Replayed++
		if jc.d.InputLossy {
			w.Lossy++
		}
		was, now := jc.d, jc.replayed
		switch {
		case now.Verdict != was.Verdict:
			rec := *r
			rec.Verdict, rec.Reason, rec.PolicyRevision, rec.judged = was.Verdict, was.Reason, was.PolicyRevision, nil
			w.Changes = append(w.Changes, Change{From: was.Verdict, To: now.Verdict, Reason: now.Reason, Record: &rec})
		case now.Reason != was.Reason:
			w.SameVerdict++
		default:
			w.Unchanged++
		}
	}
	w.sortChanges()
	w.Stats.Elapsed = time.Since(start)
	return w, nil
}

// sortChanges orders the changes by change (ALLOW→DENY, ...), each in
// the order it was found.
func (w *WhatIf) sortChanges() {
	slices.SortStableFunc(w.Changes, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
}

// memo keeps the decisions a deterministic policy made on exact recorded
// inputs: agents repeat themselves (the same file read, the same test
// run), and the same input judged again gives the same decision. Keyed by
// a SHA-256 of everything a replay reads, so that no one can make two
// inputs share an entry; bounded.
type memo struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]policy.Decision
}

const maxMemo = 1 << 20

func newMemo(pol *policy.Policy) *memo {
	if !pol.Deterministic() {
		return nil
	}
	return &memo{m: make(map[[sha256.Size]byte]policy.Decision)}
}

func (m *memo) replay(ctx context.Context, pol *policy.Policy, r *Record, d *events.Decision) (policy.Decision, error) {
	if m == nil {
		return replay(ctx, pol, r, d)
	}
	h := sha256.New()
	args := []byte(r.Args)
	if d.Args != nil {
		args = d.Args
	}
	for _, part := range [][]byte{d.Input, args, []byte(d.ShellLine)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	h.Write([]byte{boolByte(d.BashChecked)})
	var key [sha256.Size]byte
	h.Sum(key[:0])
	m.mu.Lock()
	got, ok := m.m[key]
	m.mu.Unlock()
	if ok {
		return got, nil
	}
	got, err := replay(ctx, pol, r, d)
	if err == nil {
		m.mu.Lock()
		if len(m.m) < maxMemo {
			m.m[key] = got
		}
		m.mu.Unlock()
	}
	return got, err
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// replay judges one recorded decision of r again under pol.
func replay(ctx context.Context, pol *policy.Policy, r *Record, d *events.Decision) (policy.Decision, error) {
	args, err := judgedArgs(r, d)
	if err != nil {
		return policy.Decision{}, err
	}
	return pol.Replay(ctx, recorded(d), args)
}

// judgedArgs are the arguments d was made on, decoded as the executor
// decoded them: the approver's when they were modified, else the
// invocation's.
func judgedArgs(r *Record, d *events.Decision) (map[string]any, error) {
	raw := []byte(r.Args)
	if d.Args != nil {
		raw = d.Args
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte(`{}`) // as the executor reads a call without arguments
	}
	args, err := policy.DecodeArgs(raw)
	if err != nil {
		return nil, fmt.Errorf("the recorded arguments: %w", err)
	}
	return args, nil
}

func recorded(d *events.Decision) policy.Recorded {
	return policy.Recorded{Input: d.Input, ShellLine: d.ShellLine, BashChecked: d.BashChecked, Lossy: d.InputLossy, Session: d.Session}
}

// ErrNotJudged is Explain's error for an invocation with no decision
// recorded with its input.
var ErrNotJudged = errors.New("no decision with its input is recorded for this invocation: the policy never judged it, or it was recorded before decisions kept their inputs")

// Explain reads invocation id (see Show) and explains, from OPA's trace,
// the decision pol makes on the input it was judged on. The record comes
// with it, its recorded decision in Verdict, Reason and PolicyRevision.
func Explain(ctx context.Context, js jetstream.JetStream, id string, since time.Time, pol *policy.Policy) (*Record, *policy.Explanation, error) {
	r, err := Show(ctx, js, id, since)
	if err != nil {
		return nil, nil, err
	}
	jc := r.decision()
	if jc == nil {
		return r, nil, ErrNotJudged
	}
	d := jc.d
	r.Verdict, r.Reason, r.PolicyRevision = d.Verdict, d.Reason, d.PolicyRevision
	args, err := judgedArgs(r, d)
	if err != nil {
		return r, nil, err
	}
	ex, err := pol.Explain(ctx, recorded(d), args)
	return r, ex, err
}
