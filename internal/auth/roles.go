// Package auth gives a fleet its identities: one NATS identity (an nkey)
// per member, each with the subject permissions of its role, so that the
// bus itself enforces who may do what. `toolbus init DIR` writes them;
// the bus loads DIR's auth.conf and every part connects with its seed.
//
// The permissions are the design's contract: only executors take
// invocations and publish results; only approvers answer confirmations;
// only admins push policy or revoke the allowlist; only the registry
// writes the catalogue; auditors read the audit stream and nothing else;
// agents invoke, cancel their own calls and read the catalogue. Subjects
// that bind a message to its sender carry the sender's name
// (events.InvokeSubject, events.AnswerSubject, ...) and each identity may
// publish them only with its own name, which makes the name proven.
//
// Agents and the MCP facade, which a model steers, each live in a NATS
// account of their own (see Grant): the services account, where the
// streams, the buckets and the services are, is out of their reach but
// for the service subjects it exports to them. A service answers them
// on the reply subject the bus made for the request, which leads back
// into the requester's own account and nowhere else, so no reply subject
// an agent names can make a service, or JetStream, write into the
// services account with the service's rights.
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
// registry, executor). The auditor and the approver live in it too.
const ServicesAccount = "TOOLBUS"

// ownAccount says whether a role's members each live in an account of
// their own, reaching the services account only through what it exports
// to them.
func ownAccount(r Role) bool { return r == RoleAgent || r == RoleFacade }

// Grant is what one member may reach: the account it lives in, its
// permissions there, and, for a member with an account of its own, the
// subjects of the services account it may send to (service imports,
// answered only to it) and hear (stream imports).
type Grant struct {
	Account     string
	Permissions *server.Permissions
	Services    []string
	Streams     []string
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
	services := []string{events.InvokeSubject(name), events.InvokeBatchSubject(name), events.CancelSubject(name),
		events.CallerResultSubject(name), events.OutputSubject(name), events.SubjectOutputPrefix + name + ".answer.*",
		events.ClaimAllSubject, events.ClaimSubjectPrefix + "*",
		"$SRV.PING.>", "$SRV.INFO.>"}
	if role == RoleFacade {
		services = append(services, events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsCaller, name))
	}
	// The catalogue, the state of the MCP servers and discovery commands
	// behind it (toolbus tools list) and the pushed policy, read one
	// message at a time or the last of each key: JetStream's direct get,
	// which answers only the requester and writes nothing. Creating a
	// consumer is not among them: its deliver subject would be the
	// caller's to choose, in the services account.
	for _, b := range []string{events.CatalogBucket, events.PolicyBucket, events.MCPStatusBucket, events.DiscoveryStatusBucket} {
		services = append(services, "$JS.API.STREAM.INFO.KV_"+b, "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.DIRECT.GET.KV_"+b+".>")
	}
	streams := []string{events.CatalogLiveSubject + ".>"}
	inbox := identity.InboxPrefix(name) + ".>"
	p := perms{}
	p.pub(inbox) // a caller's note to itself (invoke.Client's fence)
	p.jsInfo()   // its own account's, which has no JetStream: how bus.Connect tells
	for _, s := range services {
		p.pub(LocalSubject(s))
	}
	p.sub(inbox)
	p.sub(streams...)
	return Grant{Account: name, Permissions: p.permissions(), Services: services, Streams: streams}
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
// It is one switch over the roles, kept whole so that a reviewer sees
// every role's rights side by side.
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
			events.SubjectCatalogChanged, "$SRV.PING."+events.ExecutorService)
		p.respond()
		p.jsInfo()
		p.makesBuckets()
		p.manageKV(events.CatalogBucket, events.RegistryStateBucket)
		p.pub("$JS.API.STREAM.INFO.OBJ_TOOLBUS_CATALOG_SNAPSHOT", "$JS.API.STREAM.DELETE.OBJ_TOOLBUS_CATALOG_SNAPSHOT")
	case RoleExecutor:
		p.sub(events.InvokeSubject("*"), events.InvokeBatchSubject("*"), events.ExecSubjectPrefix+"*",
			events.Request(events.SubjectCancel), events.CancelSubject("*"), events.ClaimAllSubject, events.ClaimSubjectPrefix+"*",
			events.AnswerSubjectPrefix+">", events.Request(events.SubjectDiscoverPrefix+"*"), events.Request(events.SubjectMCPDiscoverPrefix+"*"), "$SRV.>",
			events.OutputSubject("*"), events.SubjectOutputPrefix+"*.answer.*",
			events.SubjectCatalogChanged) // to hear that the registry took it for lost
		// Results, heartbeats and progress go to the callers' inboxes,
		// many per call: an executor may publish to any inbox of the
		// services account, and answer requests from other accounts on
		// the reply subjects the bus made for them (_R_).
		p.pub("_INBOX.>", "_R_.>",
			// The records of the requests it takes.
			events.SubjectInvoke+".*", events.SubjectInvokeBatch+".*", events.SubjectCancel, events.SubjectCancel+".*",
			events.SubjectDiscoverPrefix+"*", events.SubjectMCPDiscoverPrefix+"*",
			events.SubjectResult, events.SubjectDecision, events.SubjectStep, events.SubjectHook, events.SubjectProgressPrefix+">",
			events.SubjectConfirm, events.SubjectConfirmAnswered, events.SubjectConfirmRejected, events.SubjectConfirmClosed,
			events.ExecSubjectPrefix+"*", events.ClaimAllSubject, events.ClaimSubjectPrefix+"*",
			// A batch's calls are sent, and given up, by the executor
			// that coordinates the batch, for the batch's caller.
			events.InvokeSubject("*"), events.Request(events.SubjectCancel),
			events.Request(events.SubjectRegister), events.Request(events.SubjectRegistryRemove), events.Request(events.SubjectRegistryToggle),
			events.SubjectPolicyPrefix+"applied", events.SubjectPolicyPrefix+"rejected",
			events.SubjectDiscoveryStatus, events.SubjectMCPStatus,
			"$SRV.PING.>", "$SRV.INFO.>")
		p.jsInfo()
		p.makesBuckets()
		p.manageKV(events.AllowlistBucket, events.DiscoveryStatusBucket, events.MCPStatusBucket, events.InvocationIDBucket)
		p.manageObjects(events.OutputBucket)
		// The policy and catalogue buckets are made by whoever comes
		// first, with the same config; only an admin writes the policy's
		// keys, only the registry the catalogue's.
		p.createKV(events.PolicyBucket, events.CatalogBucket)
		p.readKV(events.PolicyBucket, events.CatalogBucket)
	case RoleApprover:
		p.sub(events.SubjectConfirmAll, "$SRV.>")
		p.pub(events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsApprover, name), "$SRV.PING.>")
		p.respond()
		p.jsInfo()
		// Approvers follow the confirmation subjects of the audit stream,
		// and read nothing else of it: the server checks the filter named
		// in a consumer's create subject against its config.
		p.readStreamFiltered(events.AuditStream, events.SubjectConfirmAll)
		p.readKV(events.CatalogBucket, events.AllowlistBucket)
	case RoleAuditor:
		p.respond()
		p.jsInfo()
		p.readStream(events.AuditStream)
		// The ends of the checkpoint chain, which the bus keeps outside
		// the stream (and alone writes): audit verify checks the stream
		// against them.
		p.readKV(events.AuditChainBucket)
	case RoleAgent, RoleFacade:
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

// readStreamFiltered lets the member read stream s only through
// consumers of one filter among subjects; no single messages.
func (p *perms) readStreamFiltered(s string, subjects ...string) {
	p.pub("$JS.API.STREAM.INFO." + s)
	for _, f := range subjects {
		p.pub("$JS.API.CONSUMER.CREATE." + s + ".*." + f)
	}
	p.pub("$JS.API.CONSUMER.INFO."+s+".>", "$JS.API.CONSUMER.DELETE."+s+".>", "$JS.API.CONSUMER.MSG.NEXT."+s+".>",
		"$JS.ACK."+s+".>", "$JS.FC."+s+".>")
}

func (p *perms) readKV(buckets ...string) {
	for _, b := range buckets {
		p.readStream("KV_" + b)
		if b == events.CatalogBucket {
			// Where its changes are republished: bus.Watch.
			p.sub(events.CatalogLiveSubject + ".>")
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
