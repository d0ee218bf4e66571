package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// FuzzReceiver: whatever a sender puts in the timestamp, signature and
// body, the receiver takes a delivery (204) only when it is signed with
// the secret, its timestamp is within Tolerance and its body is a
// payload; everything else is refused and handed to nobody. sign makes
// the fuzzer's input correctly signed, so that what comes after the
// signature check is explored too.
func FuzzReceiver(f *testing.F) {
	secret := []byte("the-fuzzed-receivers-secret-32by")
	now := time.Unix(1_800_000_000, 0)
	f.Add(strconv.FormatInt(now.Unix(), 10), "", []byte(`{"id":"r1","event":"confirm.waiting","tool":"write_file"}`), true)
	f.Add(strconv.FormatInt(now.Unix()-400, 10), "", []byte(`{"id":"r1"}`), true)
	f.Add(strconv.FormatInt(now.Unix(), 10), "sha256=00", []byte(`{"id":"r1"}`), false)
	f.Add("", "", []byte(`{}`), true)
	f.Add("1e9", "", []byte(`{"id":""}`), true)
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte, sign bool) {
		if sign {
			m := hmac.New(sha256.New, secret)
			m.Write([]byte(ts + "." + string(body)))
			sig = "sha256=" + hex.EncodeToString(m.Sum(nil))
		}
		handled := 0
		rc := &Receiver{Secret: secret, Now: func() time.Time { return now }, Handle: func(Payload) { handled++ }}
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set("X-Toolbus-Timestamp", ts)
		req.Header.Set("X-Toolbus-Signature", sig)
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, req)

		sec, err := strconv.ParseInt(ts, 10, 64)
		fresh := err == nil && now.Sub(time.Unix(sec, 0)).Abs() <= Tolerance
		var p Payload
		payload := json.NewDecoder(bytes.NewReader(body)).Decode(&p) == nil && p.ID != ""
		want := sign && ts != "" && fresh && payload && len(body) <= maxBody
		// Header values cannot hold every string: a sender whose
		// header was cleaned sent something else, which is refused.
		if req.Header.Get("X-Toolbus-Timestamp") != ts || req.Header.Get("X-Toolbus-Signature") != sig {
			want = false
		}
		if got := w.Code == http.StatusNoContent; got != want {
			t.Fatalf("ts %q sig %q body %q signed %v: status %d, want taken=%v", ts, sig, body, sign, w.Code, want)
		}
		if handled != map[bool]int{true: 1, false: 0}[want] {
			t.Fatalf("handled %d times, want taken=%v", handled, want)
		}
	})
}
