package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
)

// AuditOptions are the audit stream's settings of the process that owns
// the bus (toolbus up, bus): retention and checkpoints.
type AuditOptions struct {
	MaxAge       *time.Duration
	MaxBytes     *int64
	Checkpoint   *time.Duration
	StoreKeyFile *string
}

// StoreKeyEnv names the variable that may hold the store's key.
const StoreKeyEnv = "TOOLBUS_STORE_KEY"

// AuditFlags registers --audit-max-age, --audit-max-bytes and
// --audit-checkpoint on fs.
func AuditFlags(fs *flag.FlagSet) *AuditOptions {
	return &AuditOptions{
		MaxAge:       fs.Duration("audit-max-age", 0, "keep audit events this long (0: until --audit-max-bytes is reached)"),
		MaxBytes:     fs.Int64("audit-max-bytes", 0, "keep at most this many bytes of audit events, dropping the oldest (0: 1 GiB)"),
		Checkpoint:   fs.Duration("audit-checkpoint", time.Minute, "publish a signed checkpoint of the audit stream this often (0: never); toolbus audit verify checks them"),
		StoreKeyFile: fs.String("store-key-file", "", "encrypt the bus's store at rest with the key in this file (or env "+StoreKeyEnv+"); every start needs the same key"),
	}
}

// Apply puts the retention into cfg.
func (o *AuditOptions) Apply(cfg *busnode.Config) error {
	if *o.MaxAge < 0 || *o.MaxBytes < 0 || *o.Checkpoint < 0 {
		return fmt.Errorf("--audit-max-age, --audit-max-bytes and --audit-checkpoint cannot be negative")
	}
	cfg.AuditMaxAge, cfg.AuditMaxBytes = *o.MaxAge, *o.MaxBytes
	cfg.StoreKey = os.Getenv(StoreKeyEnv)
	if *o.StoreKeyFile != "" {
		data, err := os.ReadFile(*o.StoreKeyFile)
		if err != nil {
			return fmt.Errorf("--store-key-file: %w", err)
		}
		cfg.StoreKey = strings.TrimSpace(string(data))
		if cfg.StoreKey == "" {
			return fmt.Errorf("--store-key-file %s is empty", *o.StoreKeyFile)
		}
	}
	return nil
}

// StartCheckpoints publishes the audit stream's checkpoints, signed with
// the key in dataDir (made on first use); the returned stop ends it.
func (o *AuditOptions) StartCheckpoints(b *bus.Bus, dataDir string, log *slog.Logger) (stop func(), err error) {
	if *o.Checkpoint == 0 {
		return func() {}, nil
	}
	key, err := audit.LoadOrCreateKey(dataDir)
	if err != nil {
		return nil, err
	}
	c := audit.StartCheckpointer(b.Conn(), b.JetStream(), key, Identity("bus"), *o.Checkpoint, log)
	return c.Stop, nil
}
