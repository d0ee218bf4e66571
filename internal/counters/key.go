package counters

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
)

// Key is a name for a count of the parts given, fit for a key and a
// subject token: their SHA-256, each part length-prefixed so that no two
// lists of parts share one, cut to 128 bits and base64url-encoded. The
// parts may hold any bytes a caller chose.
func Key(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		writeLen(h, len(p))
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
}

func writeLen(h hash.Hash, n int) {
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(n))])
}
