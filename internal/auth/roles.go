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
)

// Roles lists every role, in the order `toolbus init` makes them.
var Roles = []Role{RoleBus, RoleAdmin, RoleRegistry, RoleExecutor, RoleApprover, RoleAuditor, RoleAgent}

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
			events.OutputSubject("*"),
			events.SubjectCatalogChanged) // to hear that the registry took it for lost
		// Results, heartbeats and progress go to the callers' inboxes,
		// many per call: an executor may publish to any inbox.
		p.pub("_INBOX.>",
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
		p.manageKV(events.AllowlistBucket, events.DiscoveryStatusBucket, events.MCPStatusBucket)
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
	case RoleAgent:
		// Its calls' stored outputs it reads through an executor, which
		// gives a principal only its own: no object store can be
		// confined to some of its objects.
		p.pub(events.InvokeSubject(name), events.InvokeBatchSubject(name), events.CancelSubject(name), events.CallerResultSubject(name), events.OutputSubject(name),
			events.ClaimAllSubject, events.ClaimSubjectPrefix+"*",
			events.AnswerSubject(events.AnswerSubjectPrefix+"*", events.AnswerAsCaller, name),
			"$SRV.PING.>", "$SRV.INFO.>")
		p.respond()
		p.jsInfo()
		// The catalogue and the state of the MCP servers and discovery
		// commands behind it (toolbus tools list), the pushed policy.
		p.readKV(events.CatalogBucket, events.PolicyBucket, events.MCPStatusBucket, events.DiscoveryStatusBucket)
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
