package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// maxBody bounds a request body: an answer's edited arguments are the
// largest thing the page sends.
const maxBody = 1 << 20

var indexPage = template.Must(template.ParseFS(assets, "assets/index.html"))

func (s *Server) routes() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	g := s.auth.guard
	mux.Handle("GET /{$}", g(s.index))
	mux.Handle("GET /static/{file}", g(func(w http.ResponseWriter, r *http.Request, _ caller) {
		r.URL.Path = "/" + r.PathValue("file")
		if r.URL.Path == "/index.html" {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	mux.Handle("GET /api/state", g(s.getState))
	mux.Handle("GET /api/events", g(s.events))
	mux.Handle("/api/answer", g(s.answer))
	mux.Handle("/api/revoke", g(s.revoke))
	mux.Handle("/", g(func(w http.ResponseWriter, r *http.Request, _ caller) { http.NotFound(w, r) }))
	return mux
}

// index serves the page with the session's CSRF token in a meta element,
// which only a page of this origin can read.
func (s *Server) index(w http.ResponseWriter, r *http.Request, c caller) {
	var buf bytes.Buffer
	csrf := ""
	if c.session != "" {
		csrf = s.auth.csrf(c.session)
	}
	if err := indexPage.Execute(&buf, map[string]string{"CSRF": csrf, "Approver": s.cfg.Approver.Identity().ID}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (s *Server) current() (state, <-chan struct{}, <-chan struct{}) {
	st, changed := s.cfg.Approver.Snapshot()
	allow, allowChanged := s.allow.snapshot()
	return newState(st, allow, s.cfg.Approver.Identity().ID, s.cfg.Redact), changed, allowChanged
}

func (s *Server) getState(w http.ResponseWriter, _ *http.Request, _ caller) {
	st, _, _ := s.current()
	writeJSON(w, http.StatusOK, st)
}

// events streams the state: whole at once, then again on every change of
// the queue or the allowlist, with a comment now and then so proxies keep
// an idle stream open. It ends when the client goes or the console stops;
// the page reconnects.
func (s *Server) events(w http.ResponseWriter, r *http.Request, _ caller) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		st, changed, allowChanged := s.current()
		data, err := json.Marshal(st)
		if err != nil {
			s.log.Error("console: encode the state", "err", err)
			return
		}
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", data); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	wait:
		for {
			select {
			case <-changed:
				break wait
			case <-allowChanged:
				break wait
			case <-tick.C:
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
					return
				}
			case <-r.Context().Done():
				return
			case <-s.stopping:
				return
			}
		}
	}
}

// answerBody is what the page sends to answer a request.
type answerBody struct {
	// AnswerTo names the request answered: its own token, unique to it.
	AnswerTo string `json:"answerTo,omitempty"`
	// InvocationID names it by its call, which is refused when two
	// requests of that id wait: an agent may reuse an id to put another
	// request beside the one the person read.
	InvocationID string         `json:"invocationId"`
	Outcome      events.Outcome `json:"outcome"`
	// Args is the edited arguments of modify_with_editor, as the JSON
	// text the person typed.
	Args    string `json:"args,omitempty"`
	Message string `json:"message,omitempty"`
}

// ack is the answer's fate as the page shows it.
type ack struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, c caller) {
	if !s.auth.sameOrigin(w, r, c) {
		return
	}
	var body answerBody
	if !readJSON(w, r, &body) {
		return
	}
	st, _ := s.cfg.Approver.Snapshot()
	if body.AnswerTo == "" && body.InvocationID != "" {
		var waiting []approve.Request
		for _, r := range st.OfInvocation(body.InvocationID) {
			if r.Pending() {
				waiting = append(waiting, r)
			}
		}
		if len(waiting) > 1 {
			writeError(w, http.StatusConflict, "two requests of this call wait: answer one by its answerTo")
			return
		}
		if len(waiting) == 1 {
			body.AnswerTo = waiting[0].AnswerTo
		}
	}
	req, found := st.Find(body.AnswerTo)
	switch {
	case body.AnswerTo == "" && body.InvocationID == "":
		writeError(w, http.StatusBadRequest, "answerTo is empty")
		return
	case !found || !req.Pending():
		writeError(w, http.StatusConflict, approve.ErrNotPending.Error())
		return
	}
	ans := approve.Answer{Outcome: body.Outcome, Message: body.Message}
	if body.Outcome == events.ModifyWithEditor {
		var obj map[string]any
		if err := json.Unmarshal([]byte(body.Args), &obj); err != nil || obj == nil {
			writeError(w, http.StatusBadRequest, "the edited arguments are not a JSON object: "+errText(err))
			return
		}
		ans.Args = json.RawMessage(body.Args)
	}
	a, err := s.cfg.Approver.Answer(r.Context(), body.AnswerTo, ans)
	switch {
	case errors.Is(err, approve.ErrNotPending):
		writeError(w, http.StatusConflict, err.Error())
		return
	case errors.Is(err, approve.ErrNotOffered) || errors.Is(err, events.ErrInvalid):
		// Only what the policy offered, in the contract's shape, reaches
		// the bus.
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.log.Warn("console: an answer failed", "invocation", body.InvocationID, "err", err)
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.log.Info("console: answered", "invocation", body.InvocationID, "outcome", body.Outcome, "accepted", a.Accepted, "reason", a.Reason)
	writeJSON(w, http.StatusOK, ack{Accepted: a.Accepted, Reason: a.Reason})
}

func errText(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request, c caller) {
	if !s.auth.sameOrigin(w, r, c) {
		return
	}
	var body struct {
		Key string `json:"key"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Key == "" {
		writeError(w, http.StatusBadRequest, "key is empty")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Allowlist.Get(ctx, body.Key); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no allowlist entry %q", body.Key))
			return
		}
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	if err := s.cfg.Allowlist.Delete(ctx, body.Key); err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.log.Info("console: revoked an allowlist entry", "key", body.Key)
	writeJSON(w, http.StatusOK, map[string]string{"revoked": body.Key})
}

// readJSON decodes a JSON body; a browser cannot send application/json
// across origins without a preflight the console never grants, which is
// one more wall against a cross-site form.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "the body must be application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the body does not decode: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
