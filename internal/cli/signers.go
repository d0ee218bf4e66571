package cli

import (
	"errors"
	"flag"
	"os"
	"path/filepath"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/policy"
)

// PolicySignersFlag adds --policy-signers to fs. What it returns loads
// the trust list a part enforces pushed policy by: the file the flag
// names, else the fleet's beside the identity the part connects to url
// with (toolbus init writes it there), else none: a part with none
// enforces no pushed policy, and says so.
func PolicySignersFlag(fs *flag.FlagSet) func(url string) (*policy.Signers, error) {
	file := fs.String("policy-signers", "", "the trust list of policy signers: public keys whose signed revisions to enforce (default: "+auth.PolicySignersFile+" beside the identity, as toolbus init writes it)")
	return func(url string) (*policy.Signers, error) { return PolicySigners(*file, url) }
}

// PolicySigners loads the trust list in file, else the one beside the
// identity a part connects to url with; nil when there is none.
func PolicySigners(file, url string) (*policy.Signers, error) {
	if file != "" {
		return policy.LoadSigners(file)
	}
	seed := identityFor(url)
	if seed == "" {
		return nil, nil
	}
	beside := filepath.Join(filepath.Dir(seed), auth.PolicySignersFile)
	if _, err := os.Stat(beside); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return policy.LoadSigners(beside)
}
