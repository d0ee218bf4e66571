package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// logTap sits under a streamable-HTTP session's HTTP client and reads the
// response stream of each request that carries a call's token as it goes
// by: a log message the server sends there is that call's, and goes to
// where the call's log messages go (session.track). It reads the
// session's standalone stream (its GET) too: a log message there names
// no call, and is handed to session.loggedAside, which gives it to a
// call only on a session of one caller. mcp-go's client tells its
// notification handler nothing of the stream a notification came on.
type logTap struct {
	base http.RoundTripper
	sess *session
}

// maxTappedRequest is the largest request body the tap looks into for a
// token; a call's request is far smaller.
const maxTappedRequest = 1 << 20

func (t *logTap) RoundTrip(req *http.Request) (*http.Response, error) {
	token := t.tokenOf(req)
	standalone := req.Method == http.MethodGet
	resp, err := t.base.RoundTrip(req)
	if err != nil || (token == "" && !standalone) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &tappedStream{ReadCloser: resp.Body, sess: t.sess, token: token}
	return resp, nil
}

// tokenOf is the call token of a POST's JSON-RPC request, "" for none;
// the body is put back for the transport below.
func (t *logTap) tokenOf(req *http.Request) string {
	if req.Method != http.MethodPost || req.Body == nil || req.ContentLength > maxTappedRequest {
		return ""
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxTappedRequest+1))
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if err != nil || len(body) > maxTappedRequest {
		return ""
	}
	var msg struct {
		Params struct {
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return ""
	}
	token, _ := msg.Params.Meta.ProgressToken.(string)
	if !strings.HasPrefix(token, "toolbus-") {
		return ""
	}
	return token
}

// tappedStream passes a response stream on unchanged, and hands each log
// message event in it to the call of token; a token of "" is the
// session's standalone stream.
type tappedStream struct {
	io.ReadCloser
	sess  *session
	token string
	line  []byte // the line read so far
	data  []byte // the data lines of the event read so far
}

// maxTappedEvent bounds an event the tap holds while it reads it; a
// larger one is passed on and not looked into.
const maxTappedEvent = 1 << 20

func (s *tappedStream) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	for _, b := range p[:n] {
		if b != '\n' {
			if len(s.line) < maxTappedEvent {
				s.line = append(s.line, b)
			}
			continue
		}
		s.endLine()
	}
	return n, err
}

// endLine takes in the line read: a data line is kept, an empty line ends
// the event.
func (s *tappedStream) endLine() {
	line := bytes.TrimSuffix(s.line, []byte("\r"))
	s.line = s.line[:0]
	switch {
	case len(line) == 0:
		s.event()
		s.data = s.data[:0]
	case bytes.HasPrefix(line, []byte("data:")):
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		if len(s.data) < maxTappedEvent {
			s.data = append(s.data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		}
	}
}

// event hands the event's message to the call when it is a log message.
func (s *tappedStream) event() {
	if !bytes.Contains(s.data, []byte(`"notifications/message"`)) {
		return
	}
	var n struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(s.data, &n) != nil || n.Method != "notifications/message" {
		return
	}
	params := append(json.RawMessage(nil), n.Params...)
	if s.token == "" {
		s.sess.loggedAside(params)
		return
	}
	if log := s.sess.logTo(s.token); log != nil {
		log(params)
	}
}
