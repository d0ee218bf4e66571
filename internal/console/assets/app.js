// The toolbus console page. Every string shown here may come from a
// prompt-injected agent: it is set as text (textContent, value, title),
// never parsed as markup, and control and bidi characters are made visible.
"use strict";

(function () {
  // The session is the token, kept in this tab's sessionStorage: it
  // belongs to the console's origin (scheme, host and port) alone, so a
  // page an agent serves on another port never sees it, and the browser
  // sends it nowhere by itself. It arrives in the address's fragment
  // (#token=, never sent to any server) or, from older addresses, its
  // query, and leaves the address bar and the history at once.
  const tokenKey = "toolbus-console-token";
  // A link to one request (a webhook's notice) names it in the fragment,
  // #request=ANSWERTO. The wish is kept in the tab, so that a tab that
  // opened the link signed out still selects the request once it signs
  // in; the link itself grants nothing.
  const linkedKey = "toolbus-console-linked-request";
  // With the organization's sign-in (OIDC), the session takes the
  // token's place in sessionStorage. The provider sends the person back
  // to the console's /auth/callback, which sends them on with #signin=,
  // the sign-in's state; the tab then shows the secret it kept when it
  // started the sign-in, and only then gets the session: a sign-in that
  // another tab or person started gives this tab nothing.
  const bindingKey = "toolbus-console-signin-binding";
  let finishing = null; // the state of a sign-in to finish
  let signedIn = null; // who the console says is signed in, with OIDC
  function takeToken() {
    const hash = new URLSearchParams(location.hash.slice(1));
    if (hash.get("signin")) finishing = hash.get("signin");
    const from = hash.get("token") || new URLSearchParams(location.search).get("token");
    if (from) sessionStorage.setItem(tokenKey, from);
    const linked = hash.get("request");
    if (linked) sessionStorage.setItem(linkedKey, linked);
    if (location.hash || location.search) history.replaceState(null, "", location.pathname);
  }
  takeToken();
  // An address pasted into a tab already on the console changes only the
  // fragment, which loads no page: take what it brings, and start again.
  window.addEventListener("hashchange", () => {
    takeToken();
    connect();
  });
  function token() { return sessionStorage.getItem(tokenKey) || ""; }

  // Cards are keyed by request (its answer token): a call whose arguments
  // were modified is asked about again, as a new request of the same
  // invocation, and another request may reuse an invocation id; each is
  // a card of its own.
  const cards = new Map(); // key -> {el, req}
  let recent = []; // ended requests, newest first
  let keep = 100;
  const allowlist = new Map(); // key -> entry
  let offset = 0; // server clock minus browser clock, in ms
  let stream = null; // the AbortController of the event stream
  let retry = 1000;

  // visible shows characters that could hide or reorder what a person
  // reads (escape sequences, bidi overrides, zero-width marks) as escapes.
  const hidden = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;
  function visible(s) {
    return String(s == null ? "" : s).replace(hidden, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = visible(text);
    return e;
  }
  function q(root, sel) { return root.querySelector(sel); }

  // ---- connection ----
  // The events come as server-sent events read with fetch, which, unlike
  // EventSource, can send the token as a header.
  async function connect() {
    if (stream) stream.abort();
    const ctl = new AbortController();
    stream = ctl;
    if (finishing) {
      const state = finishing;
      finishing = null;
      try {
        const r = await fetch("/auth/finish", {
          method: "POST", credentials: "omit", cache: "no-store",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ state: state, binding: sessionStorage.getItem(bindingKey) || "" }),
        });
        const data = await r.json();
        if (!r.ok) throw new Error(data.error || "HTTP " + r.status);
        sessionStorage.setItem(tokenKey, data.session);
      } catch (e) {
        sessionStorage.removeItem(tokenKey);
        showSignIn("sign-in failed: " + e.message);
        return;
      } finally {
        sessionStorage.removeItem(bindingKey);
      }
    }
    if (!token()) {
      // Whether the console signs people in is asked of the API.
      const probe = await fetch("/api/state", { cache: "no-store", credentials: "omit" }).catch(() => null);
      if (probe && probe.headers.get("X-Toolbus-Sign-In") === "oidc") {
        showSignIn("signed out: sign in with your organization's account");
        return;
      }
      setConn(false, "signed out: open the address with #token= that toolbus printed");
      if (sessionStorage.getItem(linkedKey)) setLinked("The request this link names is shown once you sign in: open the address toolbus printed in this tab.");
      return;
    }
    let r;
    try {
      r = await fetch("/api/events", { headers: { Authorization: "Bearer " + token() }, cache: "no-store", signal: ctl.signal });
    } catch (e) {
      return reconnect(ctl);
    }
    if (r.status === 401 || r.status === 403) {
      if (r.headers.get("X-Toolbus-Sign-In") === "oidc") {
        sessionStorage.removeItem(tokenKey);
        showSignIn("signed out, or the sign-in expired: sign in again");
        return;
      }
      setConn(false, "signed out: open the address with #token= that toolbus printed");
      return;
    }
    if (!r.ok || !r.body) return reconnect(ctl);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          dispatch(buf.slice(0, end));
          buf = buf.slice(end + 2);
        }
      }
    } catch (e) {
      // the stream broke off: reconnect below
    }
    reconnect(ctl);
  }
  function reconnect(ctl) {
    if (stream !== ctl) return; // a newer connection took over
    setConn(false, "reconnecting…");
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 15000);
  }
  function dispatch(block) {
    let name = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (!data) return; // a keep-alive
    const ev = JSON.parse(data);
    if (name === "snapshot") {
      retry = 1000;
      setConn(true, "live");
      reset(ev);
    }
    if (name === "snapshot" || name === "change") apply(ev, name === "snapshot");
  }
  // showSignIn offers the organization's sign-in.
  function showSignIn(text) {
    setSignedIn(null);
    setConn(false, text);
    document.getElementById("signin").hidden = false;
    if (sessionStorage.getItem(linkedKey)) setLinked("The request this link names is shown once you sign in.");
  }
  function randomHex(n) {
    const b = new Uint8Array(n);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }
  document.getElementById("signin").addEventListener("click", async () => {
    const binding = randomHex(32);
    sessionStorage.setItem(bindingKey, binding);
    try {
      const r = await fetch("/auth/start", {
        method: "POST", credentials: "omit", cache: "no-store",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ binding: binding }),
      });
      const data = await r.json();
      if (!r.ok) throw new Error(data.error || "HTTP " + r.status);
      location.assign(data.url);
    } catch (e) {
      setConn(false, visible("sign-in failed: " + e.message));
    }
  });
  document.getElementById("signout").addEventListener("click", async () => {
    try { await post("/api/signout", {}); } catch (e) { /* the session ends here anyway */ }
    sessionStorage.removeItem(tokenKey);
    connect();
  });
  // setSignedIn shows who is signed in (OIDC), or the name field of a
  // console people share by its token.
  function setSignedIn(who) {
    signedIn = who;
    document.getElementById("signin").hidden = true;
    document.getElementById("signout").hidden = !who;
    document.getElementById("person-label").hidden = !!who;
    const s = document.getElementById("signed-in");
    s.hidden = !who;
    if (who) {
      let text = "signed in as " + (who.name || who.email || "?");
      if (who.email && who.name) text += " <" + who.email + ">";
      text += who.groups && who.groups.length ? " (groups: " + who.groups.join(", ") + ")" : " (no groups)";
      text += ", until " + when(who.until);
      s.textContent = visible(text);
      s.title = visible(who.iss);
    }
  }
  function setConn(up, text) {
    const c = document.getElementById("conn");
    c.textContent = text;
    c.className = "conn " + (up ? "up" : "down");
  }

  // ---- state ----
  // reset forgets what the page showed: a snapshot follows, whole.
  function reset(hello) {
    document.getElementById("approver").textContent = visible(hello.approver);
    setSignedIn(hello.signedIn || null);
    keep = hello.keep || keep;
    for (const c of cards.values()) c.el.remove();
    cards.clear();
    recent = [];
    allowlist.clear();
  }

  // apply applies a change: requests new or changed, requests ended,
  // requests gone, allowlist entries added and revoked.
  function apply(ch, whole) {
    offset = Date.parse(ch.now) - Date.now();
    const list = document.getElementById("pending");
    for (const req of ch.pending || []) {
      let c = cards.get(req.key);
      if (!c) {
        c = { el: newCard(req), req: req };
        cards.set(req.key, c);
        list.appendChild(c.el);
      }
      c.req = req;
      renderRejected(c.el, req);
    }
    for (const req of ch.ended || []) {
      drop(req.key);
      recent = recent.filter((r) => r.key !== req.key);
      recent.unshift(req);
    }
    recent.length = Math.min(recent.length, keep);
    for (const key of ch.gone || []) drop(key);
    for (const e of ch.allow || []) allowlist.set(e.key, e);
    for (const key of ch.revoked || []) allowlist.delete(key);
    document.getElementById("pending-count").textContent = String(cards.size);
    document.getElementById("pending-empty").hidden = cards.size > 0;
    if (whole || (ch.ended || []).length) renderRecent(recent);
    if (whole || (ch.allow || []).length || (ch.revoked || []).length) renderAllowlist(sortedAllowlist());
    tick();
    showLinked(whole);
  }

  // showLinked selects the request a link named, once: its card when it
  // waits; else, on a whole snapshot, it says what became of it.
  function showLinked(whole) {
    const key = sessionStorage.getItem(linkedKey);
    if (!key) return;
    const c = cards.get(key);
    if (c) {
      sessionStorage.removeItem(linkedKey);
      for (const o of document.querySelectorAll(".request.linked")) o.classList.remove("linked");
      c.el.classList.add("linked");
      c.el.scrollIntoView({ block: "start" });
      setLinked("");
      return;
    }
    if (!whole) return;
    sessionStorage.removeItem(linkedKey);
    const r = recent.find((x) => x.key === key);
    setLinked(r ? "The request the link names no longer waits: " + r.tool + ", " + outcomeOf(r) + (r.answer ? " by " + r.answer.by : "") + "."
      : "The request the link names does not wait here: it ended, or this console does not know it.");
  }
  function setLinked(text) {
    const n = document.getElementById("linked");
    n.textContent = visible(text);
    n.hidden = !text;
  }
  function drop(key) {
    const c = cards.get(key);
    if (c) {
      c.el.remove();
      cards.delete(key);
    }
  }
  function sortedAllowlist() {
    return Array.from(allowlist.values()).sort((a, b) => (Date.parse(a.addedAt) - Date.parse(b.addedAt)) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  function newCard(req) {
    const node = document.getElementById("card").content.firstElementChild.cloneNode(true);
    node.dataset.invocation = req.invocationId;
    node.dataset.request = req.requestId;
    node.dataset.key = req.key;
    q(node, ".tool").textContent = visible(req.tool);
    q(node, ".server").textContent = req.server ? visible("on " + req.server) : "";
    q(node, ".kind").textContent = visible(req.kind);
    q(node, ".caller").textContent = visible(who(req.caller));
    q(node, ".invocation").textContent = visible(req.invocationId);
    q(node, ".reason").textContent = visible(req.reason);
    const pretty = req.args === undefined ? "" : JSON.stringify(req.args, null, 2);
    q(node, ".args").textContent = visible(pretty);
    q(node, ".modify-args").value = pretty;
    if (req.shortened) {
      // What the approver would approve is more than is shown: say so
      // before anything else, and offer no editor over a part.
      const warn = q(node, ".cut");
      warn.hidden = false;
      warn.textContent = "Shown only in part: this request is longer than an approver is shown, and each cut part says where it was cut. The whole call is in the audit trail; allow it only if you know what the rest is.";
      if (typeof req.args === "string") q(node, ".modify-open").disabled = true;
    }
    if (req.command) {
      q(node, ".command-block").hidden = false;
      renderCommand(q(node, ".command"), q(node, ".flags"), req.command, req.flagged || []);
    }
    if (req.diff) {
      q(node, ".diff-block").hidden = false;
      const box = q(node, ".diff");
      let sideBySide = false;
      box.appendChild(unifiedDiff(req.diff));
      q(node, ".diff-toggle").addEventListener("click", (ev) => {
        sideBySide = !sideBySide;
        box.replaceChildren(sideBySide ? splitDiff(req.diff) : unifiedDiff(req.diff));
        ev.target.textContent = sideBySide ? "unified" : "side by side";
      });
    }
    const always = q(node, ".always");
    for (const opt of req.always || []) {
      const b = el("button", "always-btn", "Always: " + opt.remembers);
      b.type = "button";
      b.dataset.outcome = opt.outcome;
      b.addEventListener("click", () => send(node, { outcome: opt.outcome }));
      always.appendChild(b);
    }
    q(node, ".allow-once").addEventListener("click", () => send(node, { outcome: "proceed_once" }));
    q(node, ".deny").addEventListener("click", () => send(node, { outcome: "cancel", message: q(node, ".deny-reason").value }));
    q(node, ".modify-open").addEventListener("click", () => { q(node, ".modify").hidden = !q(node, ".modify").hidden; });
    q(node, ".modify-send").addEventListener("click", () => send(node, { outcome: "modify_with_editor", args: q(node, ".modify-args").value }));
    return node;
  }

  function who(id) {
    if (!id) return "";
    let s = id.id || "";
    if (id.session) s += " (session " + id.session + ")";
    return s;
  }

  function renderRejected(node, req) {
    // A call that needs several people: how many approved, and who.
    const progress = q(node, ".progress");
    progress.hidden = !req.progress;
    progress.textContent = req.progress ? "needs " + req.needs + " people: " + req.progress : "";
    const ul = q(node, ".rejected");
    ul.replaceChildren();
    for (const r of req.rejected || []) {
      ul.appendChild(el("li", "", "refused: " + r.outcome + " by " + r.by + ": " + r.reason));
    }
  }

  // renderCommand shows the shell line with the parts the policy flagged
  // marked, each saying why on hover and in the list below.
  function renderCommand(pre, ul, cmd, flags) {
    const marks = [];
    for (const f of flags) {
      if (!f.text) continue;
      for (let i = cmd.indexOf(f.text); i >= 0; i = cmd.indexOf(f.text, i + f.text.length)) {
        marks.push({ start: i, end: i + f.text.length, why: f.why });
      }
      ul.appendChild(el("li", "", f.text + " — " + f.why));
    }
    marks.sort((a, b) => a.start - b.start || b.end - a.end);
    let at = 0;
    for (const m of marks) {
      if (m.start < at) continue; // overlaps one already marked
      pre.appendChild(document.createTextNode(visible(cmd.slice(at, m.start))));
      const mark = el("mark", "flagged", cmd.slice(m.start, m.end));
      mark.title = visible(m.why);
      pre.appendChild(mark);
      at = m.end;
    }
    pre.appendChild(document.createTextNode(visible(cmd.slice(at))));
  }

  function lineClass(line) {
    if (line.startsWith("+++") || line.startsWith("---")) return "file";
    if (line.startsWith("@@")) return "hunk";
    if (line.startsWith("+")) return "add";
    if (line.startsWith("-")) return "del";
    if (line.startsWith("[") || line.startsWith("\\")) return "note";
    return "ctx";
  }

  function diffLines(diff) {
    const lines = diff.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    return lines;
  }

  function unifiedDiff(diff) {
    const box = el("div", "unified");
    for (const line of diffLines(diff)) {
      box.appendChild(el("div", "line " + lineClass(line), line === "" ? " " : line));
    }
    return box;
  }

  // splitDiff lays the hunks out old | new, pairing each run of removed
  // lines with the added lines that follow it.
  function splitDiff(diff) {
    const table = el("table", "split");
    const body = el("tbody");
    table.appendChild(body);
    let oldNo = 0, newNo = 0, dels = [], adds = [];
    function cell(tr, no, text, cls) {
      tr.appendChild(el("td", "no", no === null ? "" : String(no)));
      tr.appendChild(el("td", "line " + cls, text === null ? "" : text));
    }
    function flush() {
      for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
        const tr = el("tr");
        const d = dels[i], a = adds[i];
        cell(tr, d ? d.no : null, d ? d.text : null, d ? "del" : "none");
        cell(tr, a ? a.no : null, a ? a.text : null, a ? "add" : "none");
        body.appendChild(tr);
      }
      dels = [];
      adds = [];
    }
    for (const line of diffLines(diff)) {
      const cls = lineClass(line);
      if (cls === "del") { dels.push({ no: oldNo++, text: line.slice(1) }); continue; }
      if (cls === "add") { adds.push({ no: newNo++, text: line.slice(1) }); continue; }
      flush();
      if (cls === "ctx") {
        const tr = el("tr");
        cell(tr, oldNo++, line.slice(1), "ctx");
        cell(tr, newNo++, line.slice(1), "ctx");
        body.appendChild(tr);
        continue;
      }
      if (cls === "hunk") {
        const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
        if (m) { oldNo = Number(m[1]); newNo = Number(m[2]); }
      }
      const tr = el("tr");
      const td = el("td", "line " + cls, line);
      td.colSpan = 4;
      tr.appendChild(td);
      body.appendChild(tr);
    }
    flush();
    return table;
  }

  function outcomeOf(r) {
    if (r.answer) return r.answer.outcome;
    if (r.closed) return "closed: " + r.closed.errorType;
    return r.status;
  }

  function renderRecent(recent) {
    const body = q(document.getElementById("recent"), "tbody");
    body.replaceChildren();
    for (const r of recent) {
      const tr = el("tr");
      tr.dataset.invocation = r.invocationId;
      tr.dataset.key = r.key;
      tr.appendChild(el("td", "", r.ended ? when(r.ended) : ""));
      tr.appendChild(el("td", "", r.tool));
      tr.appendChild(el("td", "", who(r.caller)));
      tr.appendChild(el("td", "outcome", outcomeOf(r)));
      tr.appendChild(el("td", "by", r.answer ? r.answer.by : ""));
      tr.appendChild(el("td", "", r.answer ? (r.answer.message || "") : (r.closed ? r.closed.reason : "")));
      body.appendChild(tr);
    }
  }

  function allows(e) {
    switch (e.scope) {
      case "command": {
        const words = e.argv && e.argv.length ? e.argv.join(" ") : e.prefix || "";
        return "command " + words + (e.exact ? "" : " …");
      }
      case "path": return "edits of " + (e.path || "");
      case "server": return "MCP server " + (e.server || "");
      default: return [e.tool, e.server, e.path, e.prefix].filter(Boolean).join(" ");
    }
  }

  function renderAllowlist(entries) {
    const body = q(document.getElementById("allowlist"), "tbody");
    body.replaceChildren();
    document.getElementById("allowlist-empty").hidden = entries.length > 0;
    for (const e of entries) {
      const tr = el("tr");
      tr.dataset.key = e.key;
      tr.appendChild(el("td", "", e.scope));
      tr.appendChild(el("td", "allows", (e.tool ? e.tool + ": " : "") + allows(e)));
      tr.appendChild(el("td", "", e.by));
      tr.appendChild(el("td", "", e.for));
      tr.appendChild(el("td", "", e.addedAt ? when(e.addedAt) : ""));
      const td = el("td");
      const b = el("button", "revoke", "Revoke");
      b.type = "button";
      b.addEventListener("click", () => revoke(e.key, b));
      td.appendChild(b);
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  function tick() {
    const now = Date.now() + offset;
    for (const c of cards.values()) {
      const left = q(c.el, ".left");
      if (!c.req.deadline) { left.textContent = ""; continue; }
      const s = Math.floor((Date.parse(c.req.deadline) - now) / 1000);
      left.textContent = s > 0 ? Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0") + " left" : "deadline passed";
      left.classList.toggle("urgent", s < 30);
    }
  }

  // ---- actions ----
  async function post(path, body) {
    const r = await fetch(path, {
      method: "POST",
      credentials: "omit",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token() },
      body: JSON.stringify(body),
    });
    let data = {};
    try { data = await r.json(); } catch (e) { data = { error: "HTTP " + r.status }; }
    if (!r.ok) throw new Error(data.error || "HTTP " + r.status);
    return data;
  }

  // when shows a time as every toolbus table does: the date, the time to
  // the second and the zone, in the reader's zone (internal/human).
  function when(iso) {
    const d = new Date(iso);
    const p = (n) => String(n).padStart(2, "0");
    const zone = d.toLocaleTimeString("en-US", { timeZoneName: "short" }).split(" ").pop();
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
      p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + " " + zone;
  }

  // What each answer is called in "Your answers".
  const answerLabels = {
    proceed_once: "allowed once",
    proceed_always: "allowed always",
    proceed_always_server: "allowed always, for the server",
    proceed_always_tool: "allowed always, for the tool",
    modify_with_editor: "allowed with changed arguments",
    cancel: "denied",
  };

  // The name the person gives is kept by this browser and sent with each
  // answer: several people may share the console's one token.
  const person = document.getElementById("person");
  try { person.value = localStorage.getItem("toolbus.person") || ""; } catch (e) { /* storage off */ }
  person.addEventListener("change", () => {
    try { localStorage.setItem("toolbus.person", person.value.trim()); } catch (e) { /* storage off */ }
  });

  async function send(node, answer) {
    const req = cards.get(node.dataset.key);
    if (!req) return;
    answer.answerTo = req.req.key;
    if (!signedIn) answer.person = person.value.trim();
    const wasDisabled = new Set(Array.from(node.querySelectorAll("button")).filter((b) => b.disabled));
    for (const b of node.querySelectorAll("button")) b.disabled = true;
    const ack = q(node, ".ack");
    ack.className = "ack";
    ack.textContent = "sending…";
    let line;
    try {
      const a = await post("/api/answer", answer);
      line = a.accepted ? "accepted" : "refused: " + (a.reason || "no reason given");
      ack.classList.add(a.accepted ? "accepted" : "refused");
    } catch (e) {
      line = "failed: " + e.message;
      ack.classList.add("refused");
    }
    ack.textContent = visible(line);
    let said = answerLabels[answer.outcome] || answer.outcome;
    if (answer.outcome === "cancel" && answer.message) said += " (" + answer.message + ")";
    const li = el("li", "", said + " — " + req.req.tool + " (" + req.req.invocationId + "): " + line);
    li.dataset.invocation = req.req.invocationId;
    document.getElementById("acks").prepend(li);
    for (const b of node.querySelectorAll("button")) b.disabled = wasDisabled.has(b);
  }

  async function revoke(key, button) {
    button.disabled = true;
    try {
      await post("/api/revoke", { key: key });
    } catch (e) {
      button.disabled = false;
      button.title = visible(e.message);
      button.textContent = "Revoke (failed)";
    }
  }

  setInterval(tick, 1000);
  connect();
})();
