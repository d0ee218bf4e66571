package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/tool"
)

// OutputFlags are the flags that bound what an executor keeps of calls'
// output: per call, and in the object store of whole outputs.
type OutputFlags struct {
	MaxOutput  Bytes
	StoreBytes Bytes
	StoreTTL   time.Duration
}

// AddOutputFlags declares the output flags on fs, with the executor's
// defaults.
func AddOutputFlags(fs *flag.FlagSet) *OutputFlags {
	f := &OutputFlags{MaxOutput: tool.DefaultMaxOutput, StoreBytes: executor.DefaultOutputStoreBytes}
	fs.Var(&f.MaxOutput, "max-output", "bytes of output a call keeps at most (e.g. 64MiB); the rest is dropped with a note")
	fs.Var(&f.StoreBytes, "output-store-bytes", "size of the object store of whole outputs (e.g. 1GiB); when full, results are capped with a note")
	fs.DurationVar(&f.StoreTTL, "output-store-ttl", executor.DefaultOutputStoreTTL, "how long whole outputs are kept")
	return f
}

// Apply sets the output bounds of cfg.
func (f *OutputFlags) Apply(cfg *executor.Config) {
	cfg.MaxOutput, cfg.OutputStoreBytes, cfg.OutputStoreTTL = int64(f.MaxOutput), int64(f.StoreBytes), f.StoreTTL
}

// Bytes is a flag.Value for a size: a number of bytes, with an optional
// unit (KB, MB, GB, KiB, MiB, GiB).
type Bytes int64

var units = []struct {
	suffix string
	size   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

func (b *Bytes) String() string { return strconv.FormatInt(int64(*b), 10) }

// Set parses s.
func (b *Bytes) Set(s string) error {
	s = strings.TrimSpace(s)
	unit := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, unit = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.size
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/unit {
		return fmt.Errorf("%q is not a size in bytes (like 512MiB)", s)
	}
	*b = Bytes(n * unit)
	return nil
}
