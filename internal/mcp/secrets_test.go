package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// TestServerSecretsNeverEnterTheStream: the headers of an HTTP server and
// the environment of a stdio server, secrets both, reach the servers, and
// nothing the fleet keeps holds them: no event of the audit stream, no
// entry of the MCP status or catalogue buckets, even once a server has
// failed with its secret in the way.
func TestServerSecretsNeverEnterTheStream(t *testing.T) {
	const header, env = "header-secret-0123456789abcdef", "env-secret-0123456789abcdef"
	t.Setenv("EDGE_TOKEN", header)
	var seen atomic.Bool // the server's handlers run on goroutines of their own
	url := httpServer(t, newTestServer(nil), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+header {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			seen.Store(true)
			h.ServeHTTP(w, r)
		})
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {
		"edge": {"httpUrl": %q, "headers": {"Authorization": "Bearer ${EDGE_TOKEN}"}, "trust": true},
		"local": {"command": %q, "env": {%q: "1", "API_TOKEN": %q}, "trust": true},
		"wrong": {"httpUrl": %q, "headers": {"Authorization": "Bearer not-the-%s"}, "trust": true}}}`,
		url, exe, serveStdioEnv, env, url, header)))
	f.waitState(t, "edge", events.MCPConnected)
	f.waitState(t, "local", events.MCPConnected)
	f.waitState(t, "wrong", events.MCPDisconnected)
	if res := f.call(t, "echo", `{"message":"hi"}`, nil); res.Error != nil {
		t.Fatalf("echo: %+v", res)
	}
	if !seen.Load() {
		t.Fatal("the header never reached the server")
	}

	ctx := context.Background()
	stream, err := f.js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	check := func(where string, data []byte) {
		for _, s := range []string{header, env} {
			if strings.Contains(string(data), s) {
				t.Errorf("%s holds a secret: %.300s", where, data)
			}
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("audit event #%d on %s", seq, m.Subject), m.Data)
	}
	for _, bucket := range []string{events.MCPStatusBucket, events.CatalogBucket} {
		kv, err := f.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for key := range keys.Keys() {
			if e, err := kv.Get(ctx, key); err == nil {
				check(bucket+"/"+key, e.Value())
			}
		}
	}
}
