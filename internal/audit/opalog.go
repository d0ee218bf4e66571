package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// DecisionLogWriter writes the policy decisions among an export's events
// in the shape of OPA's decision log (the events OPA's decision logger
// sends: EventV1 of github.com/open-policy-agent/opa/v1/plugins/logs),
// one JSON object a line, so that tooling built for OPA's decision logs
// reads toolbus's. A decision is an executor's tool.decision event, or
// the one folded into its record of a result (events.Result.Decision);
// every other event is passed over. Each is the decision as recorded,
// its input through the export's redaction.
type DecisionLogWriter struct {
	W io.Writer
}

var _ Sink = (*DecisionLogWriter)(nil)

// Write writes the decisions of batch to W.
func (d *DecisionLogWriter) Write(_ context.Context, batch []Line) error {
	var buf []byte
	for _, l := range batch {
		dec, err := decisionOf(l)
		if err != nil {
			return err
		}
		if dec == nil {
			continue
		}
		data, err := json.Marshal(decisionLogEvent(l, dec))
		if err != nil {
			return fmt.Errorf("the decision of #%d does not encode: %w", l.Seq, err)
		}
		buf = append(append(buf, data...), '\n')
	}
	_, err := d.W.Write(buf)
	return err
}

// decisionOf is the decision l holds, nil when it holds none. The event
// is read as recorded, after redaction, without the checks of
// events.Decode: a field redaction changed must not cost the decision.
func decisionOf(l Line) (*events.Decision, error) {
	switch l.Kind {
	case events.SubjectDecision:
		var dec events.Decision
		if err := json.Unmarshal(l.Event, &dec); err != nil {
			return nil, fmt.Errorf("the decision #%d does not decode: %w", l.Seq, err)
		}
		return &dec, nil
	case events.SubjectResult:
		var res struct {
			Decision *events.Decision `json:"decision"`
		}
		if err := json.Unmarshal(l.Event, &res); err != nil {
			return nil, fmt.Errorf("the result #%d does not decode: %w", l.Seq, err)
		}
		return res.Decision, nil
	}
	return nil, nil
}

// opaDecisionLog is an event of OPA's decision log (EventV1): the fields
// toolbus has, with its own under custom.toolbus.
type opaDecisionLog struct {
	Labels      map[string]string        `json:"labels"`
	DecisionID  string                   `json:"decision_id"`
	TraceID     string                   `json:"trace_id,omitempty"`
	SpanID      string                   `json:"span_id,omitempty"`
	Bundles     map[string]opaBundleInfo `json:"bundles,omitempty"`
	Path        string                   `json:"path"`
	Input       json.RawMessage          `json:"input,omitempty"`
	Result      opaDecisionResult        `json:"result"`
	RequestedBy string                   `json:"requested_by,omitempty"`
	Timestamp   time.Time                `json:"timestamp"`
	Custom      map[string]any           `json:"custom"`
}

type opaBundleInfo struct {
	Revision string `json:"revision,omitempty"`
}

// opaDecisionResult is the value of data.toolbus.decision as the
// executor enforced it.
type opaDecisionResult struct {
	Verdict    events.Verdict `json:"verdict"`
	Reason     string         `json:"reason"`
	Idempotent bool           `json:"idempotent,omitempty"`
}

// decisionPath is the policy's decision as OPA's decision log names a
// query of the data API: data.toolbus.decision (policy.Query).
const decisionPath = "toolbus/decision"

// decisionLogEvent is dec, recorded as l, as an event of OPA's decision
// log. Its labels name the executor that decided, as OPA's name the
// instance; its bundle, the policy revision; requested_by, the principal
// of the call's caller, as the bus proved it; custom.toolbus, where the
// decision is in the trail.
func decisionLogEvent(l Line, dec *events.Decision) opaDecisionLog {
	ev := opaDecisionLog{
		Labels:      map[string]string{"id": dec.Sender.ID, "type": "toolbus"},
		DecisionID:  dec.ID,
		Bundles:     map[string]opaBundleInfo{"toolbus": {Revision: dec.PolicyRevision}},
		Path:        decisionPath,
		Input:       dec.Input,
		Result:      opaDecisionResult{Verdict: dec.Verdict, Reason: dec.Reason, Idempotent: dec.Idempotent},
		RequestedBy: dec.Principal,
		Timestamp:   dec.Time,
	}
	if parts := strings.Split(dec.Trace, "-"); TraceID(dec.Trace) != "" {
		ev.TraceID, ev.SpanID = parts[1], parts[2]
	}
	trail := map[string]any{"seq": l.Seq, "subject": l.Subject, "invocation": dec.InvocationID, "call": dec.Call, "tool": dec.Tool}
	if dec.Cached {
		trail["cached"] = true
	}
	if dec.InputLossy {
		trail["inputLossy"] = true
	}
	if dec.Attempt > 0 {
		trail["attempt"] = dec.Attempt
	}
	ev.Custom = map[string]any{"toolbus": trail}
	return ev
}
