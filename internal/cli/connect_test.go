package cli

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// logEvents is a slog handler that hands each message to a test as it is
// logged.
type logEvents struct {
	mu   sync.Mutex
	msgs []string
	on   func(msg string)
}

func (h *logEvents) Enabled(context.Context, slog.Level) bool { return true }
func (h *logEvents) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logEvents) WithGroup(string) slog.Handler            { return h }
func (h *logEvents) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	if h.on != nil {
		h.on(r.Message)
	}
	return nil
}

func (h *logEvents) logged() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.msgs, "\n")
}

// isolate keeps the identity ConnectWaiting finds to the test's: none of
// the person's contexts or seeds.
func isolate(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv(IdentityEnv, "")
	for _, env := range []string{"TOOLBUS_NATS_CREDS", "TOOLBUS_NATS_CA", "TOOLBUS_NATS_CERT", "TOOLBUS_NATS_KEY"} {
		t.Setenv(env, "")
	}
}

// A daemon started before its bus waits for it, saying so, and connects
// once the bus listens.
func TestConnectWaitingWaitsForABusThatStartsLater(t *testing.T) {
	isolate(t)
	addr := testkit.UnusedAddr(t)
	waiting := make(chan struct{})
	var once sync.Once
	events := &logEvents{on: func(msg string) {
		if strings.HasPrefix(msg, "waiting for the bus") {
			once.Do(func() { close(waiting) })
		}
	}}
	type result struct {
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		b, err := ConnectWaiting(ctx, "nats://"+addr, "waiting-daemon", slog.New(events))
		if err == nil {
			bustest.Stop(t, b)
		}
		done <- result{err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("ConnectWaiting returned %v before any bus listened; want it to wait", r.err)
	}
	n, err := busnode.Start(context.Background(), busnode.Config{Listen: addr, DataDir: t.TempDir(), Name: "late bus", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer bustest.Stop(t, n)
	if r := <-done; r.err != nil {
		t.Fatalf("ConnectWaiting: %v; want it connected once the bus listens\nlog:\n%s", r.err, events.logged())
	}
	if !strings.Contains(events.logged(), "the bus is reachable") {
		t.Errorf("the log does not say the bus was reached:\n%s", events.logged())
	}
}

// Told to stop while it waits, a daemon stops with ErrStopped, which its
// command takes for a clean stop.
func TestConnectWaitingStopsWhenToldTo(t *testing.T) {
	isolate(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := &logEvents{on: func(msg string) {
		if strings.HasPrefix(msg, "waiting for the bus") {
			cancel()
		}
	}}
	_, err := ConnectWaiting(ctx, "nats://"+testkit.UnusedAddr(t), "stopped-daemon", slog.New(events))
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("ConnectWaiting: %v; want ErrStopped", err)
	}
}

// A bus that answers and refuses the daemon's identity is not waited for:
// trying again would change nothing, and the daemon must say why it
// cannot run. Were it to wait, the test stops it, and ErrStopped fails
// the test.
func TestConnectWaitingFailsAtOnceWhenRefused(t *testing.T) {
	isolate(t)
	fleet, stranger := t.TempDir(), t.TempDir()
	if _, err := auth.Init(fleet, auth.DefaultMembers()); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Init(stranger, []auth.Member{{Name: "registry", Role: auth.RoleRegistry}}); err != nil {
		t.Fatal(err)
	}
	n, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: "fleet bus",
		AuthConfig: filepath.Join(fleet, auth.ServerConfigFile), NkeyFile: identity.SeedFile(fleet, string(auth.RoleBus)), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer bustest.Stop(t, n)
	t.Setenv(IdentityEnv, identity.SeedFile(stranger, "registry"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := &logEvents{on: func(msg string) {
		if strings.HasPrefix(msg, "waiting for the bus") {
			cancel()
		}
	}}
	_, err = ConnectWaiting(ctx, n.URL(), "refused-daemon", slog.New(events))
	if err == nil || errors.Is(err, ErrStopped) {
		t.Fatalf("ConnectWaiting with an identity the bus does not know: %v; want the refusal at once\nlog:\n%s", err, events.logged())
	}
	if !strings.Contains(err.Error(), "cannot reach the bus") {
		t.Errorf("the refusal says %q; want it to name the bus it could not reach", err)
	}
}
