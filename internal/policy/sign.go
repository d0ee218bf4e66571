package policy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/events"
)

// A pushed policy set is signed by its pusher's key, and an executor
// enforces a pushed set only when a key on its own list of signers
// (Signers) signed it: the bus lets its admins push, and the signature
// says which of them vouched for these very files, for the executors
// and, in the trail, for an auditor later.
//
// The signature is over the full SHA-256 of the set's files (Digest),
// not over its revision, which is that digest cut to 64 bits: a pair of
// sets that share a revision costs about 2^32 hashes to find, and a
// signer who signed one of the pair would have signed the other.

// signedPrefix sets what a policy signature signs apart from anything
// else the same key signs (the bus's nonces, a checkpoint).
const signedPrefix = "toolbus policy set v1\x00"

// Digest is the SHA-256 of files' canonical encoding: each file's name,
// length and content, by name.
func (f Files) Digest() [sha256.Size]byte {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00%s", n, len(f[n]), f[n])
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// Signature is a policy set's signature: the signer's public key (an
// nkey, as `toolbus init` makes them) and its signature of the set.
type Signature struct {
	Signer string `json:"signer"`
	Sig    string `json:"sig"` // base64 (standard, padded)
}

// signed is what a signature of files signs.
func signed(files Files) []byte {
	d := files.Digest()
	return append([]byte(signedPrefix), d[:]...)
}

// Sign signs files with key, a key pair with its seed.
func Sign(files Files, key nkeys.KeyPair) (*Signature, error) {
	pub, err := key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("sign the policy: %w", err)
	}
	sig, err := key.Sign(signed(files))
	if err != nil {
		return nil, fmt.Errorf("sign the policy: %w", err)
	}
	return &Signature{Signer: pub, Sig: base64.StdEncoding.EncodeToString(sig)}, nil
}

// Signers are the public keys whose signatures an executor takes on a
// pushed policy set.
type Signers struct {
	keys map[string]bool
}

// Errors of a signature an executor does not take.
var (
	ErrUnsigned      = errors.New("the policy set is not signed")
	ErrUnknownSigner = errors.New("the policy set is signed by a key this executor does not trust")
	ErrBadSignature  = errors.New("the policy set's signature does not match its files")
)

// Verify says why sig of files is not one to enforce, nil when it is:
// a signature by a key on the list, of these files.
func (s *Signers) Verify(files Files, sig *Signature) error {
	switch {
	case sig == nil || sig.Signer == "" || sig.Sig == "":
		return ErrUnsigned
	case s == nil || !s.keys[sig.Signer]:
		return fmt.Errorf("%w (%s)", ErrUnknownSigner, sig.Signer)
	}
	return verifyDigest(files.Digest(), sig)
}

// VerifyAny says why none of sigs of files is one to enforce, nil when
// one is: the reason of the one that came nearest (a trusted key's bad
// signature, else an untrusted key's, else none at all).
func (s *Signers) VerifyAny(files Files, sigs []*Signature) error {
	best := ErrUnsigned
	for _, sig := range sigs {
		err := s.Verify(files, sig)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrBadSignature) || errors.Is(best, ErrUnsigned) {
			best = err
		}
	}
	return best
}

// Len is how many keys the list holds.
func (s *Signers) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// LoadSigners reads a list of signers: one public nkey a line, a line
// that starts with # a comment. A line that is not a public key is an
// error that names it: a list that silently dropped a key would refuse
// its pushes, and one that took a seed would hold a secret.
func LoadSigners(path string) (*Signers, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy signers: %w", err)
	}
	defer f.Close()
	s, err := ParseSigners(f)
	if err != nil {
		return nil, fmt.Errorf("policy signers %s: %w", path, err)
	}
	return s, nil
}

// ParseSigners reads a list of signers from r (LoadSigners).
func ParseSigners(r io.Reader) (*Signers, error) {
	s := &Signers{keys: map[string]bool{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if bytes.HasPrefix([]byte(line), []byte("S")) {
			return nil, fmt.Errorf("line %d is a seed, a secret: a list of signers holds public keys only", n)
		}
		if _, err := nkeys.FromPublicKey(line); err != nil {
			return nil, fmt.Errorf("line %d is not a public key: %v", n, err)
		}
		s.keys[line] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(s.keys) == 0 {
		return nil, errors.New("it names no key: an executor with it would take no pushed policy")
	}
	return s, nil
}

// CheckRecorded says what is wrong with a push the trail recorded, nil
// when nothing is: its digest is a full SHA-256 whose first 64 bits are
// its revision, and its signature is its signer's over that digest. It
// does not say whether the signer is trusted: an auditor knows which
// keys were (signers, when given, are held to that too).
func CheckRecorded(ev *events.PolicyEvent, signers *Signers) error {
	raw, err := hex.DecodeString(ev.Digest)
	if err != nil || len(raw) != sha256.Size {
		return fmt.Errorf("policy %s: the recorded digest %q is not a SHA-256", ev.Revision, ev.Digest)
	}
	if want := "sha256:" + ev.Digest[:16]; ev.Revision != want {
		return fmt.Errorf("policy %s: the recorded digest is of revision %s", ev.Revision, want)
	}
	sig := &Signature{Signer: ev.Signer, Sig: ev.Signature}
	if sig.Signer == "" || sig.Sig == "" {
		return fmt.Errorf("policy %s: %w", ev.Revision, ErrUnsigned)
	}
	if signers != nil && !signers.keys[sig.Signer] {
		return fmt.Errorf("policy %s: %w (%s)", ev.Revision, ErrUnknownSigner, sig.Signer)
	}
	if err := verifyDigest([sha256.Size]byte(raw), sig); err != nil {
		return fmt.Errorf("policy %s: %w", ev.Revision, err)
	}
	return nil
}

// verifyDigest checks sig against a set's digest.
func verifyDigest(digest [sha256.Size]byte, sig *Signature) error {
	raw, err := base64.StdEncoding.DecodeString(sig.Sig)
	if err != nil {
		return fmt.Errorf("%w: the signature is not base64", ErrBadSignature)
	}
	pub, err := nkeys.FromPublicKey(sig.Signer)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnknownSigner, err)
	}
	if err := pub.Verify(append([]byte(signedPrefix), digest[:]...), raw); err != nil {
		return fmt.Errorf("%w (signer %s)", ErrBadSignature, sig.Signer)
	}
	return nil
}
