package mutant

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/policy"
)

// equivalentFile lists the mutants of the default policy that change no
// verdict, one a line: the mutant's key, " -- ", and why it changes
// nothing.
const equivalentFile = "../../../policy/equivalent_mutants.txt"

func readEquivalents(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(equivalentFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, why, ok := strings.Cut(line, " -- ")
		if !ok || strings.TrimSpace(why) == "" {
			t.Fatalf("%s:%d: want \"key -- why it changes nothing\", got %q", equivalentFile, n, line)
		}
		out[strings.TrimSpace(key)] = strings.TrimSpace(why)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEveryPolicyMutantFailsATest deletes each rule body, expression,
// list entry and regular-expression alternative of the default policy in
// turn and runs the Rego tests on each: a mutant no test notices is a
// property nothing holds, unless it is listed as equivalent with the
// reason. A listed mutant that a test kills is a stale entry and fails too.
func TestEveryPolicyMutantFailsATest(t *testing.T) {
	if testkit.Race {
		// The race detector makes OPA's evaluation several times slower,
		// and the check finds no races.
		t.Skip("slow under the race detector; scripts/test.sh runs it without")
	}
	if testing.Short() {
		t.Skip("a few hundred runs of the Rego tests")
	}
	set, err := Parse(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	equivalent := readEquivalents(t)
	mutants := set.Mutants()
	if len(mutants) < 300 {
		t.Fatalf("only %d mutants: the enumeration lost its way", len(mutants))
	}
	keys := map[string]bool{}
	for _, m := range mutants {
		if keys[m.Key] {
			t.Fatalf("two mutants share the key %q", m.Key)
		}
		keys[m.Key] = true
	}
	for key := range equivalent {
		if !keys[key] {
			t.Errorf("%s lists %q, which is no mutant of the policy any more", equivalentFile, key)
		}
	}

	start := time.Now()
	results := make([]Result, len(mutants))
	errs := make([]error, len(mutants))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(2, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = set.Run(context.Background(), mutants[i])
			}
		}()
	}
	for i := range mutants {
		next <- i
	}
	close(next)
	wg.Wait()

	var killed, compile, equiv int
	for i, m := range mutants {
		r := results[i]
		switch why, listed := equivalent[m.Key]; {
		case errs[i] != nil:
			t.Errorf("%s: %v", m, errs[i])
		case r.Killed && listed:
			t.Errorf("%s: listed as equivalent (%s), but %s fails on it: take it off %s", m, why, r.Failed, equivalentFile)
		case r.Killed:
			killed++
			if r.Compile {
				compile++
			}
		case listed:
			equiv++
		default:
			t.Errorf("survivor: %s: every Rego test passes without it", m)
		}
	}
	msg := fmt.Sprintf("%d mutants: %d killed (%d of them by not compiling), %d equivalent, %d survived; %s",
		len(mutants), killed, compile, equiv, len(mutants)-killed-equiv, time.Since(start).Round(time.Second))
	t.Log(msg)
	if os.Getenv("TOOLBUS_MUTANT_LIST") != "" {
		for i, m := range mutants {
			fmt.Printf("%v\t%+v\n", m, results[i])
		}
	}
}
