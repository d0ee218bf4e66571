package mcp

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Clients that open sessions without end get maxSessions in all and
// maxClientSessions each, and no more, and none of another client's is
// dropped to make room; a session is
// unknown to another client, which cannot end it either; one its own
// client ends, or the idle sweep (a manager of no request) ends, makes
// room for another. mcp-go calls these as the endpoint's
// SessionIdManagerResolver; the endpoint's own check of the session's
// client comes first (TestFacadeSessionsBelongToTheirClient).
func TestClientSessionsAreBoundedAndFreed(t *testing.T) {
	t.Parallel()
	s := &clientSessions{owner: map[string]string{}, held: map[string]int{}}
	as := func(client string) mcpserver.SessionIdManager {
		r := httptest.NewRequest(http.MethodPost, HTTPPath, nil)
		return s.ResolveSessionIdManager(r.WithContext(WithClient(r.Context(), client)))
	}
	alice, mallory, sweep := as("alice"), as("mallory"), s.ResolveSessionIdManager(nil)
	known := func(m mcpserver.SessionIdManager, id string) bool {
		_, err := m.Validate(id)
		return err == nil
	}
	first := alice.Generate()
	for i := 1; i < maxClientSessions; i++ {
		if mallory.Generate() == "" {
			t.Fatalf("mallory's session %d of %d refused", i+1, maxClientSessions)
		}
	}
	if mallory.Generate() == "" {
		t.Fatalf("mallory's session %d refused", maxClientSessions)
	}
	if id := mallory.Generate(); id != "" {
		t.Fatalf("mallory's session past %d given: %s", maxClientSessions, id)
	}
	// Others fill the endpoint up to its bound.
	for i := 1 + maxClientSessions; i < maxSessions; i++ {
		if as(fmt.Sprintf("crowd-%d", i%16)).Generate() == "" {
			t.Fatalf("session %d of %d refused", i+1, maxSessions)
		}
	}
	if id := as("newcomer").Generate(); id != "" {
		t.Fatalf("a session past %d given: %s", maxSessions, id)
	}
	if !known(alice, first) {
		t.Fatal("a client's session was dropped to make room")
	}
	if known(mallory, first) {
		t.Error("another client's session is known to mallory")
	}
	mallory.Terminate(first)
	if !known(alice, first) {
		t.Error("mallory ended alice's session")
	}
	alice.Terminate(first)
	if known(alice, first) {
		t.Error("alice's session is still known once she ended it")
	}
	if alice.Generate() == "" {
		t.Error("a session its client ended made no room")
	}
	var idle string
	for id, client := range s.owner {
		if client == "mallory" {
			idle = id
			break
		}
	}
	sweep.Terminate(idle)
	if known(mallory, idle) {
		t.Error("a session the idle sweep ended is still known")
	}
	if alice.Generate() == "" {
		t.Error("a session the idle sweep ended made no room")
	}
}
