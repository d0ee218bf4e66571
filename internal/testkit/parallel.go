package testkit

import (
	"flag"
	"runtime"
	"strconv"
)

// OverlapWaits raises go test's -parallel, unless the command line set
// it, to four tests per CPU (at least 8), for a package whose parallel
// tests mostly wait: on liveness timers, a bus, other processes. At the
// default, one test per CPU (2 on the machine the suite's figures come
// from), those waits are served in turn. Under the race detector the
// same tests are bound by the CPU, and more of them at once only makes
// each slower: the default stays. Call it first in TestMain.
func OverlapWaits() {
	if Race {
		return
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(max(8, 4*runtime.GOMAXPROCS(0))))
	}
}
