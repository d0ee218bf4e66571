package bus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// MinServerVersion is the oldest nats-server toolbus works with, and is
// tested against (2.9 is past its end of life). What came later is used where the server has it, with a fallback below it:
//   - 2.11: direct gets in batches (batch, multi_last, up_to_seq,
//     start_time); below it, Read and LastOfEach get one message a round
//     trip (oneByOne);
//   - 2.12: counters (AllowMsgCounter), which the rates a policy holds
//     exactly need; below it, such a rate fails closed, saying why
//     (internal/counters.OpenExact).
const MinServerVersion = "2.10.0"

// ServerAtLeast says whether the server nc is connected to runs
// nats-server major.minor or later.
func ServerAtLeast(nc *nats.Conn, major, minor int) bool {
	ma, mi, ok := serverVersion(nc.ConnectedServerVersion())
	return ok && (ma > major || ma == major && mi >= minor)
}

// serverVersion reads the major and minor of a server's version
// ("2.10.29", "v2.11.0-RC.1").
func serverVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	return major, minor, err1 == nil && err2 == nil
}

// CheckServer refuses a server older than MinServerVersion, naming both:
// Connect calls it, and so does a caller that connects on its own
// (pkg/toolbus).
func CheckServer(nc *nats.Conn) error {
	major, minor, _ := serverVersion(MinServerVersion)
	if ServerAtLeast(nc, major, minor) {
		return nil
	}
	return fmt.Errorf("the bus at %s runs nats-server %s; toolbus needs nats-server %s or later, the oldest it is tested against",
		nc.ConnectedUrlRedacted(), nc.ConnectedServerVersion(), MinServerVersion)
}
