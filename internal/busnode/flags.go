package busnode

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
)

// AuditOptions are the flags of the audit stream's settings, for the
// processes that run the bus (toolbus up, bus): retention, checkpoints
// and the store's key.
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
		MaxAge:       fs.Duration("audit-max-age", bus.DefaultAuditMaxAge, "keep audit events this long (0: for good, until the trail fills)"),
		MaxBytes:     fs.Int64("audit-max-bytes", 0, "cap the audit stream at this many bytes: near it calls are refused (AUDIT_FULL), nothing is dropped (0: 1 GiB)"),
		Checkpoint:   fs.Duration("audit-checkpoint", time.Minute, "publish a signed checkpoint of the audit stream this often (0: never); toolbus audit verify checks them"),
		StoreKeyFile: fs.String("store-key-file", "", "encrypt the bus's store at rest with the key in this file (or env "+StoreKeyEnv+"); every start needs the same key"),
	}
}

// Apply puts the settings into cfg.
func (o *AuditOptions) Apply(cfg *Config) error {
	if *o.MaxAge < 0 || *o.MaxBytes < 0 || *o.Checkpoint < 0 {
		return fmt.Errorf("--audit-max-age, --audit-max-bytes and --audit-checkpoint cannot be negative")
	}
	cfg.AuditMaxAge, cfg.AuditMaxBytes, cfg.CheckpointEvery = *o.MaxAge, *o.MaxBytes, *o.Checkpoint
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
