package events

import (
	"encoding/base64"
	"time"
)

// MCP servers are hosted by executors: the executor configured with a
// server connects to it and hosts its tools. Each keeps the state of its
// servers in MCPStatusBucket, one entry per (executor, server), which any
// process reads (toolbus mcp status); every change of state is also an
// event on SubjectMCPStatus, for the audit trail.
const (
	// MCPStatusBucket is the KV bucket of MCPServerStatus entries, keyed
	// by MCPStatusKey. Entries expire MCPStatusTTL after their last
	// write; a hosting executor writes them again every MCPStatusRefresh,
	// so the entries of an executor that is gone disappear.
	MCPStatusBucket  = "TOOLBUS_MCP"
	MCPStatusTTL     = time.Minute
	MCPStatusRefresh = 20 * time.Second
	// SubjectMCPStatus carries an MCPServerStatus at every change of a
	// server's state.
	SubjectMCPStatus = "tool.mcp.status"
	// SubjectMCPDiscoverPrefix + an encoded executor id carries
	// MCPDiscoverRequest to that executor (request,
	// MCPDiscoverReply).
	SubjectMCPDiscoverPrefix = "tool.mcp.discover."
	// SubjectMCPUpdatedPrefix + a server's token (MCPUpdatedSubject)
	// carries MCPResourceUpdated: a resource of the server that a caller
	// subscribed to (Invocation.Op OpSubscribe) changed. It is outside
	// tool.>: the subscription is in the audit trail, each update of it
	// is not. Only executors publish it; the MCP facade hears it.
	SubjectMCPUpdatedPrefix = "toolbus.mcp.updated."
	// SubjectMCPUpdatedAll matches the updates of every server.
	SubjectMCPUpdatedAll = SubjectMCPUpdatedPrefix + ">"
)

// MCPUpdatedSubject is where the updates of server's resources go. The
// name is encoded, since a server's name may hold dots and wildcards.
func MCPUpdatedSubject(server string) string {
	return SubjectMCPUpdatedPrefix + base64.RawURLEncoding.EncodeToString([]byte(server))
}

// MCPState is the state of one MCP server on one executor.
type MCPState string

// The states of an MCP server.
const (
	MCPConnecting   MCPState = "connecting"
	MCPConnected    MCPState = "connected"
	MCPDisconnected MCPState = "disconnected"
	MCPDisabled     MCPState = "disabled"
)

// MCPStatusKey is the key of the status of server on executor.
func MCPStatusKey(executor, server string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(executor)) + "." + base64.RawURLEncoding.EncodeToString([]byte(server))
}

// MCPDiscoverSubject is where executor takes discovery requests.
func MCPDiscoverSubject(executor string) string {
	return RequestPrefix + SubjectMCPDiscoverPrefix + base64.RawURLEncoding.EncodeToString([]byte(executor))
}

// MCPServerStatus is one server's state on the executor that hosts it.
type MCPServerStatus struct {
	Header
	// Executor is the id of the executor that hosts the server.
	Executor  string   `json:"executor"`
	Server    string   `json:"server"`
	Transport string   `json:"transport"`
	State     MCPState `json:"state"`
	// Error is why the server is disconnected (its last error) or
	// disabled.
	Error string `json:"error,omitempty"`
	// Tools is how many of the server's tools are hosted.
	Tools int  `json:"tools"`
	Trust bool `json:"trust,omitempty"`
	// Restarts counts the connections made after the first.
	Restarts int `json:"restarts,omitempty"`
	// Since is when the server entered State; NextAttempt, for a
	// disconnected server, when it is tried again.
	Since       time.Time  `json:"since"`
	NextAttempt *time.Time `json:"nextAttempt,omitempty"`
}

// EnvelopeType implements Envelope.
func (*MCPServerStatus) EnvelopeType() string { return "tool.mcp.status" }

// Validate implements Envelope.
func (s *MCPServerStatus) Validate() error {
	typ := s.EnvelopeType()
	if err := s.header().validate(); err != nil {
		return err
	}
	switch s.State {
	case MCPConnecting, MCPConnected, MCPDisconnected, MCPDisabled:
	default:
		return invalid(typ, "unknown state %q", s.State)
	}
	if s.Executor == "" || s.Server == "" {
		return invalid(typ, "executor and server are required")
	}
	return nil
}

// MCPDiscoverRequest asks an executor to discover one server's tools
// again (seed 000 discoverToolsForServer): it lists them and registers
// the list in place of the old one. A server that is disconnected is
// connected again at once.
type MCPDiscoverRequest struct {
	Header
	Server string `json:"server"`
}

// EnvelopeType implements Envelope.
func (*MCPDiscoverRequest) EnvelopeType() string { return "tool.mcp.discover" }

// Validate implements Envelope.
func (r *MCPDiscoverRequest) Validate() error {
	if err := r.header().validate(); err != nil {
		return err
	}
	if r.Server == "" {
		return invalid(r.EnvelopeType(), "server is empty")
	}
	return nil
}

// MCPDiscoverReply answers an MCPDiscoverRequest.
type MCPDiscoverReply struct {
	Header
	RequestID string `json:"requestId"`
	Server    string `json:"server"`
	// Tools are the catalogue names of the server's tools now hosted.
	Tools []string `json:"tools,omitempty"`
	// Warnings are tools the registry or the executor refused, and why.
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// EnvelopeType implements Envelope.
func (*MCPDiscoverReply) EnvelopeType() string { return "tool.mcp.discover.reply" }

// Validate implements Envelope.
func (r *MCPDiscoverReply) Validate() error {
	if err := r.header().validate(); err != nil {
		return err
	}
	if r.RequestID == "" {
		return invalid(r.EnvelopeType(), "requestId is empty")
	}
	return nil
}

// MCPResourceUpdated says that a resource of an MCP server changed (its
// notifications/resources/updated), sent by the executor whose session of
// the server is subscribed to it. An executor sends one for a URI a
// caller holds a subscription to, however often the server says it:
// updates of one URI that come while one waits to be sent are one.
type MCPResourceUpdated struct {
	Header
	// Executor hosts the server; Server is its name there.
	Executor string `json:"executor"`
	Server   string `json:"server"`
	// URI is the resource's, as the server sent it.
	URI string `json:"uri"`
}

// EnvelopeType implements Envelope.
func (*MCPResourceUpdated) EnvelopeType() string { return "toolbus.mcp.updated" }

// Validate implements Envelope.
func (u *MCPResourceUpdated) Validate() error {
	if err := u.header().validate(); err != nil {
		return err
	}
	if u.Executor == "" || u.Server == "" || u.URI == "" {
		return invalid(u.EnvelopeType(), "executor, server and uri are required")
	}
	return nil
}
