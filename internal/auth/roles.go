// Package auth gives a fleet its identities: one NATS identity (an nkey)
// per member, each with the subject permissions of its role, so that the
// bus itself enforces who may do what. `toolbus init DIR` writes them;
// the bus loads DIR's auth.conf and every part connects with its seed.
//
// The permissions are the design's contract: only executors take
// invocations and publish results; only approvers answer confirmations;
// only admins push policy; only admins and approvers revoke the
// allowlist (through an executor); only the registry writes the
// catalogue; auditors read the audit stream and nothing else; agents
// invoke, cancel their own calls and read the catalogue. Subjects
// that bind a message to its sender carry the sender's name
// (events.InvokeSubject, events.AnswerSubject, ...) and each identity may
// publish them only with its own name, which makes the name proven.
//
// Agents and the MCP facade, which a model steers, and the approvers and
// auditors, who only answer and read, each live in a NATS account of
// their own (see Grant): the services account, where the streams, the
// buckets and the services are, is out of their reach but for the
// service subjects it exports to them. A service answers them on the
// reply subject the bus made for the request, which leads back into the
// requester's own account and nowhere else, so no reply subject such a
// member names can make a service, or JetStream, write into the
// services account with the service's rights. (In the services account,
// any member that may send a JetStream API request may name any reply
// subject there, a bucket's key say, and JetStream answers on it: only
// the members that keep the streams and buckets live there.)
package auth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

// Role is what a member of a fleet does.
type Role string

// The roles of a fleet.
const (
	RoleBus      Role = "bus"      // runs a bus node: the server's own connection
	RoleAdmin    Role = "admin"    // pushes policy, revokes the allowlist, cancels any call
	RoleRegistry Role = "registry" // keeps the catalogue
	RoleExecutor Role = "executor" // hosts tools and runs calls
	RoleApprover Role = "approver" // answers confirmation requests
	RoleAuditor  Role = "auditor"  // reads the audit stream
	RoleAgent    Role = "agent"    // calls tools
	// RoleFacade is the MCP facade (`toolbus mcp serve`): it calls tools
	// like an agent and, alone among the confined roles, answers a call's
	// confirmation as the person in front of its MCP client.
	RoleFacade Role = "facade"
)

// Roles lists every role, in the order `toolbus init` makes them.
var Roles = []Role{RoleBus, RoleAdmin, RoleRegistry, RoleExecutor, RoleApprover, RoleAuditor, RoleAgent, RoleFacade}

// ServicesAccount is the NATS account of the toolbus services: the
// streams and buckets, and the members that keep them (bus, admin,
// registry, executor).
const ServicesAccount = "TOOLBUS"

// ownAccount says whether a role's members each live in an account of
// their own, reaching the services account only through what it exports
// to them.
func ownAccount(r Role) bool {
	switch r {
	case RoleAgent, RoleFacade, RoleApprover, RoleAuditor:
		return true
	}
	return false
}

// Grant is what one member may reach: the account it lives in, its
// permissions there, and, for a member with an account of its own, the
// subjects of the services account it may send to (service imports,
// answered only to it) and hear (stream imports), and the subjects of
// its own account the services account may send to (Exports, which it
// imports).
type Grant struct {
	Account     string
	Permissions *server.Permissions
	Services    []string
	Streams     []string
	Exports     []string
}

// LocalSubject is what a member in an account of its own sends to reach
// subject s of the services account: s itself, but for the JetStream API,
// which it reaches under events.ServicesAPIPrefix.
func LocalSubject(s string) string {
	if rest, ok := strings.CutPrefix(s, "$JS.API."); ok {
		return events.ServicesAPIPrefix + "." + rest
	}
	return s
}

// GrantOf is member name of role's Grant.
func GrantOf(role Role, name string) Grant {
	if !ownAccount(role) {
		return Grant{Account: ServicesAccount, Permissions: Permissions(role, name)}
	}
	g := Grant{Account: name}
	p := perms{}
	switch role {
	case RoleAgent, RoleFacade:
		g.Services = []string{events.InvokeSubject(name), events.InvokeBatchSubject(name), events.CancelSubject(name),
			events.CallerRecordSubject(name), events.OutputSubject(name), events.SubjectOutputPrefix + name + ".answer.*",
			events.ClaimAllSubject, events.ClaimSubjectPrefix + "*",
			"$SRV.PING.>", "$SRV.INFO.>"}
		if role == RoleFacade {
			g.Services = append(g.Services, events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsCaller, name))
			// Its clients, each a principal of its own under it
			// (events.ClientPrincipal): only a facade may name one,
			// which is what makes a client principal the facade's word.
			clients := events.ClientPrincipal(name, "*")
			g.Services = append(g.Services, events.InvokeSubject(clients), events.CancelSubject(clients),
				events.CallerRecordSubject(clients), events.OutputSubject(clients), events.SubjectOutputPrefix+name+".*.answer.*",
				events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsCaller, clients))
		}
		// The catalogue, the state of the MCP servers and discovery
		// commands behind it (toolbus tools list) and the pushed policy.
		g.Services = append(g.Services, readBuckets(events.CatalogBucket, events.PolicyBucket, events.MCPStatusBucket, events.DiscoveryStatusBucket)...)
		g.Streams = []string{events.CatalogLiveSubject + ".>", events.PolicyLiveSubject + ".>"}
		if role == RoleFacade {
			// The updates of the resources its clients subscribed to,
			// which it sends on to them.
			g.Streams = append(g.Streams, events.SubjectMCPUpdatedAll)
		}
	case RoleApprover:
		// It answers as itself, hears the confirmation subjects as they
		// are sent and reads back those of the last day from the stream
		// that holds them and nothing else (events.ConfirmStream): the
		// audit stream itself, whose direct get cannot be held to some
		// of its subjects, is out of its reach. It reads the catalogue
		// and the allowlist (a console shows and follows it), and
		// revokes an entry by asking the executors, as itself.
		g.Services = []string{events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsApprover, name), events.RevokeSubject(name),
			// Not $SRV.PING.>: the services account imports this
			// account's own ping (below), and an import each way on
			// subjects that meet would be a cycle, which the server
			// refuses.
			"$SRV.PING." + events.ExecutorService, "$SRV.PING." + events.RegistryService, "$SRV.INFO.>"}
		g.Services = append(g.Services, readByDirectGet(events.ConfirmStream)...)
		g.Services = append(g.Services, readBuckets(events.CatalogBucket, events.AllowlistBucket)...)
		g.Streams = []string{events.SubjectConfirmAll, events.CatalogLiveSubject + ".>", events.AllowlistLiveSubject + ".>"}
		// Executors ask whether an approver is there before they wait
		// for one: its service's ping is exported to the services
		// account, and answered once, on the bus-made reply subject.
		g.Exports = []string{"$SRV.PING." + events.ApproverService}
		p.sub("$SRV.>")
		p.respond()
	case RoleAuditor:
		// It reads the audit stream whole, a page at a time by direct
		// get, and single messages from the stream's leader (where a
		// read must end, whether one that stopped short lags: any copy
		// answers a direct get), and the policy (policy explain) and
		// the catalogue.
		g.Services = []string{"$SRV.PING.>", "$SRV.INFO.>", "$JS.API.STREAM.MSG.GET." + events.AuditStream}
		g.Services = append(g.Services, readByDirectGet(events.AuditStream)...)
		// The records' large fields, which the records name by digest.
		g.Services = append(g.Services, readByDirectGet(events.BlobStream)...)
		g.Services = append(g.Services, readBuckets(events.CatalogBucket, events.PolicyBucket)...)
		// The ends of the checkpoint chain, which the bus keeps outside
		// the stream (and alone writes): audit verify checks the stream
		// against them.
		g.Services = append(g.Services, readBuckets(events.AuditChainBucket)...)
	}
	// The inboxes of an account of its own are its alone: no other
	// account hears them, and answers come back into them through the
	// bus's response mapping. Any client of the account may use the
	// default prefix: one the bus admits with no identity as this
	// member (toolbus up's agent) does not know its name.
	inbox := "_INBOX.>"
	p.pub(inbox)                // a caller's note to itself (invoke.Client's fence)
	p.jsInfo()                  // its own account's, which has no JetStream: how bus.Connect tells
	p.pub("$SYS.REQ.USER.INFO") // the bus says whom it admitted: one with no identity learns its name
	for _, s := range g.Services {
		p.pub(LocalSubject(s))
	}
	p.sub(inbox)
	p.sub(g.Streams...)
	g.Permissions = p.permissions()
	return g
}

// readByDirectGet is what a member in an account of its own imports to
// read stream s: its info, and its messages by JetStream's direct get,
// which answers only the requester and writes nothing. Creating a consumer is
// not among them: its deliver subject would be the member's to choose,
// in the services account.
func readByDirectGet(s string) []string {
	return []string{"$JS.API.STREAM.INFO." + s, "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>"}
}

// readBuckets is readByDirectGet of each bucket's stream: a key's value,
// or the last of each key (bus.Watch).
func readBuckets(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, readByDirectGet("KV_"+b)...)
	}
	return out
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); slices.Contains(Roles, r) {
		return r, nil
	}
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown role %q: want one of %s", s, strings.Join(names, ", "))
}

// responseWindow is how long a member may answer a message sent to it
// with a reply subject: at least as long as a confirmation waits.
const responseWindow = 24 * time.Hour

// Permissions is what member name of role may publish and subscribe to.
// It is one switch over the roles of the services account, kept whole so
// that a reviewer sees their rights side by side; the roles that live in
// accounts of their own are GrantOf's, one switch too.
func Permissions(role Role, name string) *server.Permissions {
	inbox := identity.InboxPrefix(name) + ".>"
	p := perms{}
	p.pub(inbox) // a caller's note to itself (invoke.Client's fence)
	p.sub(inbox)
	switch role {
	case RoleBus, RoleAdmin:
		// The bus's own process owns the server and its store; an admin
		// holds the fleet's keys. Neither is confined.
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}}, Subscribe: &server.SubjectPermission{Allow: []string{">"}}}
	case RoleRegistry:
		p.sub(events.Request(events.SubjectRegister), events.Request(events.SubjectRegistryRemove), events.Request(events.SubjectRegistryToggle), "$SRV.>")
		// It records the requests it takes and the changes they make;
		// it pings the executors, and takes one that stops answering off
		// its tools' hosts.
		p.pub(events.SubjectRegister, events.SubjectRegistryRemove, events.SubjectRegistryToggle,
			events.SubjectCatalogChanged, "$SRV.PING."+events.ExecutorService,
			events.BlobSubjectPrefix+"*") // the large fields of its records (events.Outline)
		p.respond()
		p.jsInfo()
		p.makesBuckets()
		p.manageKV(events.CatalogBucket, events.RegistryStateBucket)
		p.pub("$JS.API.STREAM.INFO.OBJ_TOOLBUS_CATALOG_SNAPSHOT", "$JS.API.STREAM.DELETE.OBJ_TOOLBUS_CATALOG_SNAPSHOT")
	case RoleExecutor:
		clients := events.ClientWildcard // the facades' clients' subjects
		p.sub(events.InvokeSubject("*"), events.InvokeSubject(clients), events.InvokeBatchSubject("*"), events.ExecSubjectPrefix+"*",
			events.Request(events.SubjectCancel), events.CancelSubject("*"), events.CancelSubject(clients), events.ClaimAllSubject, events.ClaimSubjectPrefix+"*",
			events.AnswerSubjectPrefix+">", events.Request(events.SubjectDiscoverPrefix+"*"), events.Request(events.SubjectMCPDiscoverPrefix+"*"), "$SRV.>",
			events.OutputSubject("*"), events.OutputSubject(clients), events.SubjectOutputPrefix+"*.answer.*", events.SubjectOutputPrefix+clients+".answer.*",
			events.CallerRecordSubject("*"), events.CallerRecordSubject(clients), events.RevokeSubject("*"),
			events.SubjectCatalogChanged) // to hear that the registry took it for lost
		// Results, heartbeats and progress go to the callers' inboxes,
		// many per call: an executor may publish to any inbox of the
		// services account, and answer requests from other accounts on
		// the reply subjects the bus made for them (_R_).
		p.pub("_INBOX.>", "_R_.>",
			// The records of the requests it takes.
			events.SubjectInvoke+".*", events.SubjectInvoke+"."+clients, events.SubjectInvokeBatch+".*",
			events.SubjectCancel, events.SubjectCancel+".*", events.SubjectCancel+"."+clients,
			events.SubjectDiscoverPrefix+"*", events.SubjectMCPDiscoverPrefix+"*",
			events.SubjectAllowlistRevoke+".*",
			events.SubjectResult, events.CallerResultSubject("*"), events.CallerResultSubject(clients), events.SubjectDecision, events.SubjectStep, events.SubjectHook, events.SubjectProgressPrefix+">",
			events.SubjectConfirm, events.SubjectConfirmAnswered, events.SubjectConfirmRejected, events.SubjectConfirmClosed,
			events.ExecSubjectPrefix+"*", events.ClaimAllSubject, events.ClaimSubjectPrefix+"*",
			// A batch's calls are sent, and given up, by the executor
			// that coordinates the batch, for the batch's caller.
			events.InvokeSubject("*"), events.Request(events.SubjectCancel),
			events.Request(events.SubjectRegister), events.Request(events.SubjectRegistryRemove), events.Request(events.SubjectRegistryToggle),
			events.SubjectPolicyPrefix+"applied", events.SubjectPolicyPrefix+"rejected", events.SubjectPolicyPrefix+"shadowed",
			events.SubjectShadow, events.SubjectShadowStats,
			// The large fields of its records (events.Outline), and how
			// full their stream is (trail.go).
			events.BlobSubjectPrefix+"*", "$JS.API.STREAM.INFO."+events.BlobStream,
			events.SubjectDiscoveryStatus, events.SubjectMCPStatus, events.SubjectMCPUpdatedPrefix+"*",
			"$SRV.PING.>", "$SRV.INFO.>")
		p.jsInfo()
		p.makesBuckets()
		p.manageKV(events.AllowlistBucket, events.DiscoveryStatusBucket, events.MCPStatusBucket, events.InvocationIDBucket, events.LimitSlotsBucket)
		// The counters of the rates the policy asks to be exact: made by
		// executors, added to with a request each (counters.Exact).
		p.pub(events.LimitCountPrefix+">", "$JS.API.STREAM.INFO."+events.LimitsStream,
			"$JS.API.STREAM.CREATE."+events.LimitsStream, "$JS.API.STREAM.UPDATE."+events.LimitsStream)
		// The counts every executor keeps and tells the others
		// (counters.Fleet): executors alone tell and hear them, so that
		// no one else can push a caller over its budgets, or lower its
		// own counts, or see who calls what.
		p.pub(events.CountSubject)
		p.sub(events.CountSubject)
		p.manageObjects(events.OutputBucket)
		// The policy and catalogue buckets are made by whoever comes
		// first, with the same config; only an admin writes the policy's
		// keys, only the registry the catalogue's.
		p.createKV(events.PolicyBucket, events.CatalogBucket)
		p.readKV(events.PolicyBucket, events.CatalogBucket)
	case RoleApprover, RoleAuditor, RoleAgent, RoleFacade:
		// They live in accounts of their own: GrantOf.
		return GrantOf(role, name).Permissions
	}
	return p.permissions()
}

// perms gathers a role's subjects.
type perms struct {
	pubs, subs []string
	responses  bool
}

func (p *perms) pub(s ...string) { p.pubs = append(p.pubs, s...) }
func (p *perms) sub(s ...string) { p.subs = append(p.subs, s...) }

// respond lets the member answer a message sent to it with a reply
// subject (a service ping, a flow-control request), once, and nothing
// else in another's inbox.
func (p *perms) respond() { p.responses = true }

func (p *perms) jsInfo() { p.pub("$JS.API.INFO") }

// makesBuckets lets the member see the audit stream's config (not its
// messages): a new bucket gets as many replicas as it has.
func (p *perms) makesBuckets() { p.pub("$JS.API.STREAM.INFO." + events.AuditStream) }

// readStream lets the member read stream s whole: its info, consumers of
// its own (ordered, ephemeral) and single messages.
func (p *perms) readStream(s string) {
	p.pub("$JS.API.STREAM.INFO."+s,
		"$JS.API.CONSUMER.CREATE."+s, "$JS.API.CONSUMER.CREATE."+s+".>",
		"$JS.API.CONSUMER.INFO."+s+".>", "$JS.API.CONSUMER.DELETE."+s+".>", "$JS.API.CONSUMER.MSG.NEXT."+s+".>",
		"$JS.API.STREAM.MSG.GET."+s, "$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
		"$JS.ACK."+s+".>", "$JS.FC."+s+".>")
}

func (p *perms) readKV(buckets ...string) {
	for _, b := range buckets {
		p.readStream("KV_" + b)
		// Where their changes are republished: bus.Watch.
		switch b {
		case events.CatalogBucket:
			p.sub(events.CatalogLiveSubject + ".>")
		case events.PolicyBucket:
			p.sub(events.PolicyLiveSubject + ".>")
		}
	}
}

func (p *perms) createKV(buckets ...string) {
	for _, b := range buckets {
		p.pub("$JS.API.STREAM.CREATE.KV_"+b, "$JS.API.STREAM.UPDATE.KV_"+b)
	}
}

// manageKV lets the member make, read and write buckets.
func (p *perms) manageKV(buckets ...string) {
	for _, b := range buckets {
		p.createKV(b)
		p.readKV(b)
		p.pub("$KV." + b + ".>")
	}
}

func (p *perms) readObjects(buckets ...string) {
	for _, b := range buckets {
		p.readStream("OBJ_" + b)
	}
}

func (p *perms) manageObjects(buckets ...string) {
	for _, b := range buckets {
		p.pub("$JS.API.STREAM.CREATE.OBJ_"+b, "$JS.API.STREAM.UPDATE.OBJ_"+b, "$JS.API.STREAM.PURGE.OBJ_"+b, "$O."+b+".>")
		p.readObjects(b)
	}
}

func (p *perms) permissions() *server.Permissions {
	out := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: dedupe(p.pubs)},
		Subscribe: &server.SubjectPermission{Allow: dedupe(p.subs)},
	}
	if p.responses {
		out.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: responseWindow}
	}
	return out
}

func dedupe(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
