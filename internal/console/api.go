package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// maxBody bounds a request body: an answer's edited arguments are the
// largest thing the page sends.
const maxBody = 1 << 20

// indexPage is the page: the same for everyone, holding nothing of the
// queue (its script fetches that with the token).
var indexPage = func() []byte {
	b, err := fs.ReadFile(assets, "assets/index.html")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return b
}()

func (s *Server) routes() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	g, pub := s.auth.guard, s.auth.public
	mux.Handle("GET /{$}", pub(s.index))
	mux.Handle("GET /static/{file}", pub(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/" + r.PathValue("file")
		if r.URL.Path == "/index.html" {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	if s.auth.signin != nil {
		mux.Handle("POST /auth/start", pub(s.signinStart))
		mux.Handle("GET /auth/callback", pub(s.signinCallback))
		mux.Handle("POST /auth/finish", pub(s.signinFinish))
	}
	mux.Handle("/api/signout", g(s.signout))
	mux.Handle("GET /api/state", g(s.getState))
	mux.Handle("GET /api/events", g(s.events))
	mux.Handle("/api/answer", g(s.answer))
	mux.Handle("/api/revoke", g(s.revoke))
	mux.Handle("/", g(http.NotFound))
	return mux
}

// index serves the page.
func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(indexPage)
}

func (s *Server) getState(w http.ResponseWriter, _ *http.Request) {
	st, _ := s.cfg.Approver.Snapshot()
	allow, _ := s.allow.snapshot()
	writeJSON(w, http.StatusOK, newState(st, allow, s.cfg.Approver.Identity().ID, s.cfg.Redact))
}

// hello is the first event of a stream: who the console answers as, and
// the whole state as one change.
type hello struct {
	Approver string `json:"approver"`
	// Keep is how many ended requests the history holds.
	Keep int `json:"keep"`
	// SignedIn is the person the page's session is of, when people sign
	// in with the organization's provider.
	SignedIn *signedIn `json:"signedIn,omitempty"`
	change
}

// events streams the state to a page as server-sent events: the whole
// of it first ("snapshot"), then each change of the queue or the
// allowlist as what changed ("change"), with a comment now and then so
// proxies keep an idle stream open. What a change costs is the size of
// the change: a queue of many large requests is sent once, not again on
// every change. It ends when the client goes or the console stops; the
// page reconnects and starts from a snapshot again.
//
// While a stream is open, a person can see the requests: it holds the
// approver present (approve.Approver.Hold), so executors send calls here
// to wait for an answer instead of denying them at once.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if release, err := s.cfg.Approver.Hold(r.Context()); err != nil {
		s.log.Warn("console: a page watches, but executors were not told an approver is present", "err", err)
	} else {
		defer release()
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	// A stream holds the approver present: it ends with the session, so
	// a page whose person's sign-in ran out holds no call.
	expired, stop := s.auth.signin.ended(sessionOf(r))
	defer stop()
	sent := newShown()
	for first := true; ; first = false {
		st, changed := s.cfg.Approver.Snapshot()
		allow, allowChanged := s.allow.snapshot()
		c := sent.diff(st, allow, s.cfg.Redact)
		st = approve.State{} // the requests are the approver's; this page holds keys only
		var ev any = c
		name := "change"
		if first {
			ev, name = hello{Approver: s.cfg.Approver.Identity().ID, Keep: s.cfg.Approver.Keep(), SignedIn: sessionOf(r).shown(), change: c}, "snapshot"
		}
		if first || !c.empty() {
			data, err := json.Marshal(ev)
			if err != nil {
				s.log.Error("console: encode a change", "err", err)
				return
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
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
			case <-expired:
				return
			case <-s.stopping:
				return
			}
		}
	}
}

// answerBody is what the page sends to answer a request.
type answerBody struct {
	// AnswerTo names the request answered: its own token, as the page
	// was sent it (its key). Never a call's id: a caller may put a
	// second request of the same id beside the one the person read.
	AnswerTo string         `json:"answerTo"`
	Outcome  events.Outcome `json:"outcome"`
	// Args is the edited arguments of modify_with_editor, as the JSON
	// text the person typed.
	Args    string `json:"args,omitempty"`
	Message string `json:"message,omitempty"`
	// Person is the name the person gave in the page, if any.
	Person string `json:"person,omitempty"`
}

// ack is the answer's fate as the page shows it.
type ack struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	if !s.auth.sameOrigin(w, r) {
		return
	}
	var body answerBody
	if !readJSON(w, r, &body) {
		return
	}
	if body.AnswerTo == "" {
		writeError(w, http.StatusBadRequest, "answerTo is empty: name the request by the key it was shown with")
		return
	}
	st, _ := s.cfg.Approver.Snapshot()
	req, found := st.Find(body.AnswerTo)
	if !found || !req.Pending() {
		writeError(w, http.StatusConflict, approve.ErrNotPending.Error())
		return
	}
	ans := approve.Answer{Outcome: body.Outcome, Message: body.Message, Person: s.auth.person(body.Person)}
	if ss := sessionOf(r); ss != nil {
		// The person is who the verified ID token names, never what the
		// page sends.
		who := ss.who
		who.Groups = slices.Clone(who.Groups)
		ans.Person, ans.Who = ss.person(), &who
	}
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
		s.log.Warn("console: an answer failed", "invocation", req.InvocationID, "answerTo", body.AnswerTo, "err", err)
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.log.Info("console: answered", "invocation", req.InvocationID, "answerTo", body.AnswerTo, "outcome", body.Outcome, "accepted", a.Accepted, "reason", a.Reason)
	writeJSON(w, http.StatusOK, ack{Accepted: a.Accepted, Reason: a.Reason})
}

func errText(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	if !s.auth.sameOrigin(w, r) {
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
	// The console's approver may not write the bucket: it asks the
	// executors, as itself, and the trail records who revoked.
	reply, err := s.cfg.Approver.Revoke(ctx, body.Key)
	switch {
	case err != nil:
		writeError(w, http.StatusBadGateway, err.Error())
		return
	case len(reply.Revoked) == 0:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no allowlist entry %q", body.Key))
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
