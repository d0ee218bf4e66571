package events

import (
	"encoding/base64"
	"time"
)

// Tools found by a discovery command (seed 000 discoverAndRegisterToolsFromCommand)
// are hosted by the executor that ran the command: they run in its
// workspace. Each such executor keeps the state of its discovery in
// DiscoveryStatusBucket, one entry per executor, which any process reads
// (toolbus tools discover finds the executors to ask there); every change
// is also an event on SubjectDiscoveryStatus, for the audit trail.
const (
	// DiscoveryStatusBucket is the KV bucket of DiscoveryStatus entries,
	// keyed by DiscoveryStatusKey. Entries expire DiscoveryStatusTTL after
	// their last write; a hosting executor writes its entry again every
	// DiscoveryStatusRefresh, so the entry of an executor that is gone
	// disappears.
	DiscoveryStatusBucket  = "TOOLBUS_DISCOVERY"
	DiscoveryStatusTTL     = time.Minute
	DiscoveryStatusRefresh = 20 * time.Second
	// SubjectDiscoveryStatus carries a DiscoveryStatus at every change.
	SubjectDiscoveryStatus = "tool.discovery.status"
	// SubjectDiscoverPrefix + an encoded executor id carries
	// DiscoverRequest to that executor (request, DiscoverReply).
	SubjectDiscoverPrefix = "tool.discovery.discover."
)

// DiscoveryStatusKey is the key of executor's discovery status.
func DiscoveryStatusKey(executor string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(executor))
}

// DiscoverSubject is where executor takes discovery requests.
func DiscoverSubject(executor string) string {
	return RequestPrefix + SubjectDiscoverPrefix + base64.RawURLEncoding.EncodeToString([]byte(executor))
}

// DiscoveryState is how an executor's last discovery went.
type DiscoveryState string

// The states of a discovery.
const (
	// DiscoveryPending: the first discovery has not ended yet.
	DiscoveryPending DiscoveryState = "pending"
	// DiscoveryOK: the last discovery succeeded.
	DiscoveryOK DiscoveryState = "ok"
	// DiscoveryFailed: the last discovery failed; the tools of the last
	// one that succeeded, if any, are still hosted.
	DiscoveryFailed DiscoveryState = "failed"
)

// DiscoveryStatus is the state of one executor's discovery command.
type DiscoveryStatus struct {
	Header
	// Executor is the id of the executor that runs the command and hosts
	// its tools; Workspace the directory both commands run in.
	Executor         string         `json:"executor"`
	Workspace        string         `json:"workspace"`
	DiscoveryCommand string         `json:"discoveryCommand"`
	CallCommand      string         `json:"callCommand"`
	State            DiscoveryState `json:"state"`
	// Error is why the last discovery failed.
	Error string `json:"error,omitempty"`
	// Warnings are what the last successful discovery skipped, and why.
	Warnings []string `json:"warnings,omitempty"`
	// Tools is how many discovered tools are hosted; Expired how many
	// more were dropped as idle and come back with the next discovery.
	Tools   int `json:"tools"`
	Expired int `json:"expired,omitempty"`
	// Runs counts the times the command ran (a discovery served from the
	// cache does not run it).
	Runs int `json:"runs"`
	// LastRun is when the command last ran, LastSuccess when it last
	// succeeded.
	LastRun     *time.Time `json:"lastRun,omitempty"`
	LastSuccess *time.Time `json:"lastSuccess,omitempty"`
}

// EnvelopeType implements Envelope.
func (*DiscoveryStatus) EnvelopeType() string { return "tool.discovery.status" }

// Validate implements Envelope.
func (s *DiscoveryStatus) Validate() error {
	typ := s.EnvelopeType()
	if err := s.header().validate(); err != nil {
		return err
	}
	switch s.State {
	case DiscoveryPending, DiscoveryOK, DiscoveryFailed:
	default:
		return invalid(typ, "unknown state %q", s.State)
	}
	if s.Executor == "" {
		return invalid(typ, "executor is empty")
	}
	return nil
}

// DiscoverRequest asks an executor to run its discovery command again
// (seed 000 discoverAllTools, for the command's tools) and host what it
// finds in place of its discovered tools. Within the executor's
// discovery cache TTL the last result is used again instead, unless
// Force is set (seed 000 CachedToolRegistry).
type DiscoverRequest struct {
	Header
	Force bool `json:"force,omitempty"`
}

// EnvelopeType implements Envelope.
func (*DiscoverRequest) EnvelopeType() string { return "tool.discovery.discover" }

// Validate implements Envelope.
func (r *DiscoverRequest) Validate() error { return r.header().validate() }

// DiscoverReply answers a DiscoverRequest.
type DiscoverReply struct {
	Header
	RequestID string `json:"requestId"`
	// Tools are the catalogue names of the discovered tools now hosted.
	Tools []string `json:"tools,omitempty"`
	// Cached says the result came from the cache, found at CachedAt,
	// without running the command.
	Cached   bool       `json:"cached,omitempty"`
	CachedAt *time.Time `json:"cachedAt,omitempty"`
	// Warnings are declarations the discovery skipped and tools the
	// registry or the executor refused, and why.
	Warnings []string `json:"warnings,omitempty"`
	// Error is why the discovery failed; the tools found before stay.
	Error string `json:"error,omitempty"`
}

// EnvelopeType implements Envelope.
func (*DiscoverReply) EnvelopeType() string { return "tool.discovery.discover.reply" }

// Validate implements Envelope.
func (r *DiscoverReply) Validate() error {
	if err := r.header().validate(); err != nil {
		return err
	}
	if r.RequestID == "" {
		return invalid(r.EnvelopeType(), "requestId is empty")
	}
	return nil
}
