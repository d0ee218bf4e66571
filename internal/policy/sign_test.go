package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func userKey(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, pub
}

// A set signed by a key on the list is taken; an unsigned one, one
// signed by another key, one changed after it was signed, and one whose
// signature is another set's are each refused, saying why.
func TestOnlyASetSignedByATrustedKeyIsTaken(t *testing.T) {
	files := Files{"toolbus.rego": "package toolbus\n\ndefault decision := {\"verdict\": \"DENY\"}\n"}
	trusted, trustedPub := userKey(t)
	stranger, _ := userKey(t)
	signers, err := ParseSigners(strings.NewReader("# the policy team\n" + trustedPub + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := Sign(files, trusted)
	if err != nil {
		t.Fatal(err)
	}
	if err := signers.Verify(files, good); err != nil {
		t.Fatalf("a set signed by a trusted key: %v", err)
	}
	other := Files{"toolbus.rego": files["toolbus.rego"] + "# another set\n"}
	otherSig, _ := Sign(other, trusted)
	byStranger, _ := Sign(files, stranger)
	forged := *good
	forged.Signer = func() string { _, pub := userKey(t); return pub }()
	raw, _ := trusted.Sign(func() []byte { d := files.Digest(); return d[:] }()) // the digest alone, as another use of the key might sign it
	unprefixed := &Signature{Signer: trustedPub, Sig: base64.StdEncoding.EncodeToString(raw)}
	for _, c := range []struct {
		name  string
		files Files
		sig   *Signature
		want  error
	}{
		{"unsigned", files, nil, ErrUnsigned},
		{"an empty signature", files, &Signature{Signer: trustedPub}, ErrUnsigned},
		{"signed by a stranger", files, byStranger, ErrUnknownSigner},
		{"a trusted key's signature claimed by another", files, &forged, ErrUnknownSigner},
		{"changed after it was signed", Files{"toolbus.rego": files["toolbus.rego"] + " "}, good, ErrBadSignature},
		{"a file added after it was signed", Files{"toolbus.rego": files["toolbus.rego"], "more.rego": "package more\n"}, good, ErrBadSignature},
		{"another set's signature", files, otherSig, ErrBadSignature},
		{"the key's signature of the bare digest", files, unprefixed, ErrBadSignature},
		{"a signature that is not base64", files, &Signature{Signer: trustedPub, Sig: "%%%"}, ErrBadSignature},
	} {
		if err := signers.Verify(c.files, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	var none *Signers
	if err := none.Verify(files, good); !errors.Is(err, ErrUnknownSigner) {
		t.Errorf("an executor with no list of signers: %v, want %v", err, ErrUnknownSigner)
	}
}

// The revision is what it was before signatures: the first 64 bits of
// the files' digest, so that the revisions in the trail still name the
// same sets.
func TestTheRevisionIsTheDigestCut(t *testing.T) {
	files := Files{"toolbus.rego": "package toolbus\n", "paths.rego": "package toolbus.paths\n", "z.rego": ""}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00%s", n, len(files[n]), files[n])
	}
	if want := "sha256:" + hex.EncodeToString(h.Sum(nil))[:16]; files.Revision() != want {
		t.Errorf("revision %s, want %s", files.Revision(), want)
	}
}

// A list of signers holds public keys only, and says which line is not
// one: a seed (a secret) or anything else is refused, and so is a list
// with no key.
func TestAListOfSignersHoldsPublicKeysOnly(t *testing.T) {
	kp, pub := userKey(t)
	seed, _ := kp.Seed()
	for _, c := range []struct{ list, says string }{
		{string(seed) + "\n", "line 1 is a seed"},
		{"# ok\n" + pub + "\nnot-a-key\n", "line 3 is not a public key"},
		{"# nobody\n\n", "names no key"},
	} {
		if _, err := ParseSigners(strings.NewReader(c.list)); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v, want it to say %q", c.list, err, c.says)
		}
	}
	s, err := ParseSigners(strings.NewReader("  " + pub + "  \n# a comment\n" + pub + "\n"))
	if err != nil || s.Len() != 1 {
		t.Errorf("a key twice, with spaces and a comment: %v, %d keys", err, s.Len())
	}
}

// FuzzParseSigners: a list of signers is a file someone can change; no
// content makes the parser panic, and every key it takes is a public key.
func FuzzParseSigners(f *testing.F) {
	_, pub := userKey(f)
	f.Add("# team\n" + pub + "\n")
	f.Add("SUAxxxx\n")
	f.Add("\x00\n\n#\n")
	f.Fuzz(func(t *testing.T, list string) {
		s, err := ParseSigners(strings.NewReader(list))
		if err != nil {
			return
		}
		for k := range s.keys {
			if _, err := nkeys.FromPublicKey(k); err != nil {
				t.Fatalf("took %q, not a public key", k)
			}
		}
	})
}
