package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
)

// ExecutorIDEnv names the id an executor goes by, when set: in the
// registry's hosts, on its subjects, in `toolbus mcp status` and in its
// logs. Unset, each executor makes one of its own, unique: two executors
// of one id would take each other's registrations and calls.
const ExecutorIDEnv = "TOOLBUS_EXECUTOR_ID"

// executorIDFile is where `toolbus up` keeps its executor's id in its data
// dir, so that a restart goes on hosting the tools the catalogue lists
// under that id instead of leaving them to an id no one answers for.
const executorIDFile = "executor-id"

// ExecutorIdentity is the identity of an executor: the first of id (its
// --id), $TOOLBUS_EXECUTOR_ID and principal (its member name in a fleet
// with identities) that is set, else NewExecutorID.
func ExecutorIdentity(id, principal string) events.Identity {
	identity := Identity("executor")
	switch {
	case id != "":
		identity.ID = id
	case os.Getenv(ExecutorIDEnv) != "":
		identity.ID = os.Getenv(ExecutorIDEnv)
	case principal != "":
		identity.ID = principal
	default:
		identity.ID = NewExecutorID()
	}
	return identity
}

// NewExecutorID is executor@HOST-XXXXXX, XXXXXX six random hex digits:
// the host says where the executor runs, the rest tells it from the
// other executors there.
func NewExecutorID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	b := make([]byte, 3)
	rand.Read(b) // never fails (crypto/rand)
	return "executor@" + host + "-" + hex.EncodeToString(b)
}

// StoredExecutorIdentity is the identity of the executor of a process
// that owns dataDir (toolbus up, which holds its lock): $TOOLBUS_EXECUTOR_ID
// when set, else the id kept in the dir, made (NewExecutorID) and kept
// there on the first start.
func StoredExecutorIdentity(dataDir string) (events.Identity, error) {
	identity := Identity("executor")
	if id := os.Getenv(ExecutorIDEnv); id != "" {
		identity.ID = id
		return identity, nil
	}
	path := filepath.Join(dataDir, executorIDFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(data)) != "":
		identity.ID = strings.TrimSpace(string(data))
		return identity, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return identity, fmt.Errorf("the executor's id: %w", err)
	}
	identity.ID = NewExecutorID()
	if err := os.WriteFile(path, []byte(identity.ID+"\n"), 0o600); err != nil {
		return identity, fmt.Errorf("the executor's id: %w", err)
	}
	return identity, nil
}
