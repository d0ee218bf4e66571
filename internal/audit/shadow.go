package audit

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// ShadowReport says what a candidate policy in shadow would have changed
// on the live calls q selects, in the shape of a replay's report (WhatIf):
// the executors recorded each call the candidate judged otherwise than
// the policy in force (events.ShadowDecision), and their counts of the
// calls it judged and dropped (events.ShadowStats). revision names the
// candidate; empty for the newest one on record.
func ShadowReport(ctx context.Context, js jetstream.JetStream, q Query, revision string) (*WhatIf, *ShadowCounts, error) {
	decisions := map[string]*events.ShadowDecision{}
	latest := map[string]*events.ShadowStats{} // by executor, of the candidate
	var newest *events.ShadowStats
	r := bus.Range{Since: q.Since, Subjects: []string{events.SubjectShadow, events.SubjectShadowStats}}
	_, err := bus.Read(ctx, js, events.AuditStream, r, func(m *bus.StoredMsg) error {
		switch m.Subject {
		case events.SubjectShadow:
			if d, err := events.Decode[events.ShadowDecision](m.Data); err == nil {
				decisions[d.Call] = d // the call's id in the trail, as its record's
			}
		case events.SubjectShadowStats:
			if s, err := events.Decode[events.ShadowStats](m.Data); err == nil {
				if newest == nil || !s.Time.Before(newest.Time) {
					newest = s
				}
				latest[s.Sender.ID+"\x00"+s.Revision] = s
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if revision == "" && newest != nil {
		// Every executor with a candidate records its counts when it
		// starts judging, when they change and when the candidate goes.
		revision = newest.Revision
	}
	counts := &ShadowCounts{Revision: revision}
	for _, s := range latest {
		if s.Revision == revision {
			counts.Judged += s.Judged
			counts.Disagreed += s.Disagreed
			counts.Dropped += s.Dropped
			counts.Executors++
		}
	}
	recs, st, err := Read(ctx, js, q)
	if err != nil {
		return nil, nil, err
	}
	w := &WhatIf{Revision: revision, Invocations: len(recs), Stats: st}
	for _, rec := range recs {
		d := decisions[rec.Call]
		if d == nil || d.Shadow.Revision != revision {
			continue
		}
		if d.Live.Verdict == d.Shadow.Verdict {
			w.SameVerdict++
		}
		c := *rec
		c.Verdict, c.Reason, c.PolicyRevision = d.Live.Verdict, d.Live.Reason, d.Live.Revision
		w.Changes = append(w.Changes, Change{From: d.Live.Verdict, To: d.Shadow.Verdict, Reason: d.Shadow.Reason, Record: &c})
	}
	w.Replayed = int(counts.Judged)
	w.Unchanged = max(w.Replayed-len(w.Changes), 0)
	w.sortChanges()
	return w, counts, nil
}

// ShadowCounts are the executors' counts for a candidate in shadow, from
// the last each recorded.
type ShadowCounts struct {
	Revision  string `json:"revision"`
	Executors int    `json:"executors"`
	Judged    uint64 `json:"judged"`
	Disagreed uint64 `json:"disagreed"`
	Dropped   uint64 `json:"dropped"`
}
