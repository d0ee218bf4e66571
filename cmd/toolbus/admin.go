package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/policy"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// withBus runs f with a connection to the bus at natsURL.
func withBus(natsURL, name string, f func(ctx context.Context, b *bus.Bus) error) error {
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, natsURL, name, log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	return f(ctx, b)
}

func runPolicy(args []string) error {
	if len(args) == 0 {
		return usageError{errors.New("policy: want test, push, show or explain")}
	}
	switch args[0] {
	case "test":
		return policyTest(args[1:])
	case "push":
		return policyPush(args[1:])
	case "show":
		return policyShow(args[1:])
	case "explain":
		return policyExplain(args[1:])
	}
	return usageError{fmt.Errorf("policy: unknown sub-command %q (want test, push, show or explain)", args[0])}
}

// policyTest runs a policy set's Rego tests with OPA's tester.
func policyTest(args []string) error {
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "list every test")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	files := policy.Files(defaultpolicy.Default())
	source := "the built-in default policy"
	if len(rest) > 1 {
		return usageError{errors.New("policy test takes at most one directory")}
	}
	if len(rest) == 1 {
		if files, err = policy.LoadDir(rest[0]); err != nil {
			return err
		}
		source = rest[0]
	}
	results, err := policy.Test(context.Background(), files)
	if err != nil {
		return err
	}
	passed, failed := 0, 0
	for _, r := range results {
		switch {
		case r.Pass:
			passed++
			if *verbose {
				fmt.Printf("PASS %s\n", r.Name)
			}
		case r.Skip:
		default:
			failed++
			fmt.Printf("FAIL %s (%s) %s\n", r.Name, r.File, r.Error)
		}
	}
	fmt.Printf("%s: %d passed, %d failed\n", source, passed, failed)
	if failed > 0 || passed == 0 {
		return fmt.Errorf("policy tests failed")
	}
	return nil
}

func policyPush(args []string) error {
	fs := flag.NewFlagSet("policy push", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{errors.New("policy push takes one directory")}
	}
	files, err := policy.LoadDir(rest[0])
	if err != nil {
		return err
	}
	return withBus(*natsURL, "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
		id := cli.Identity("cli")
		pushed, err := policy.Push(ctx, b.JetStream(), files, id.ID)
		if err != nil {
			return fmt.Errorf("policy refused, nothing pushed: %w", err)
		}
		ev := &events.PolicyEvent{Header: events.Header{Sender: id}, Status: "pushed", Revision: pushed.Revision, Source: "bucket"}
		if data, err := events.Encode(ev); err == nil {
			if err := bus.RecordOnce(ctx, b.Conn(), events.SubjectPolicyPrefix+"pushed", "policy-pushed."+pushed.Revision+"."+nuid.Next(), data); err != nil {
				fmt.Fprintf(os.Stderr, "pushed, but the push was not recorded in the audit stream: %v\n", err)
			}
		}
		fmt.Printf("pushed %s (%d files); executors apply it as they receive it\n", pushed.Revision, len(files))
		return nil
	})
}

func policyShow(args []string) error {
	fs := flag.NewFlagSet("policy show", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	asJSON := fs.Bool("json", false, "print as JSON, files included")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	return withBus(*natsURL, "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
		p, err := policy.Active(ctx, b.JetStream())
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(os.Stdout, p)
		}
		if p == nil {
			fmt.Printf("no policy pushed: executors enforce their own (the default is %s)\n", policy.Files(defaultpolicy.Default()).Revision())
			return nil
		}
		names := make([]string, 0, len(p.Files))
		for n := range p.Files {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Printf("revision: %s\npushed:   %s by %s\nfiles:    %s\n", p.Revision, p.At.Format(time.RFC3339), p.By, strings.Join(names, ", "))
		return nil
	})
}

func runAllowlist(args []string) error {
	if len(args) == 0 {
		return usageError{errors.New("allowlist: want list or revoke")}
	}
	fs := flag.NewFlagSet("allowlist "+args[0], flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	asJSON := fs.Bool("json", false, "print as JSON")
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	return withBus(*natsURL, "toolbus-allowlist", func(ctx context.Context, b *bus.Bus) error {
		switch args[0] {
		case "list", "ls":
			kv, err := executor.OpenAllowlistBucket(ctx, b.JetStream())
			if err != nil {
				return err
			}
			return allowlistList(ctx, kv, *asJSON)
		case "revoke":
			if len(rest) == 0 {
				return usageError{errors.New("allowlist revoke takes the keys to revoke (see allowlist list)")}
			}
			// Through an executor, which records who revoked what.
			reply, err := approve.Revoke(ctx, b.Conn(), cli.Identity("cli"), b.Principal(), rest)
			if reply != nil {
				for _, key := range reply.Revoked {
					fmt.Println("revoked", key)
				}
				if err == nil && len(reply.Unknown) > 0 {
					quoted := make([]string, len(reply.Unknown))
					for i, k := range reply.Unknown {
						quoted[i] = strconv.Quote(k)
					}
					err = fmt.Errorf("no allowlist entry %s", strings.Join(quoted, ", "))
				}
			}
			return err
		}
		return usageError{fmt.Errorf("allowlist: unknown sub-command %q", args[0])}
	})
}

func allowlistList(ctx context.Context, kv jetstream.KeyValue, asJSON bool) error {
	type row struct {
		Key string `json:"key"`
		events.AllowRecord
	}
	rows := []row{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var r events.AllowRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			rows = append(rows, row{key, r})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].AddedAt.Before(rows[j].AddedAt) })
	if asJSON {
		return writeJSON(os.Stdout, rows)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSCOPE\tTOOL\tSERVER\tCOVERS\tBY\tADDED")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.Scope, shown(r.Tool), shown(r.Server), shown(covers(r.AllowEntry)), shown(r.By), r.AddedAt.Format(time.RFC3339))
	}
	return w.Flush()
}

// covers says what an entry allows beyond its tool: a command line, a
// command with any arguments, a path.
func covers(e policy.AllowEntry) string {
	switch {
	case e.Scope == "command" && len(e.Argv) > 0 && e.Exact:
		return strings.Join(e.Argv, " ")
	case e.Scope == "command" && len(e.Argv) > 0:
		return strings.Join(e.Argv, " ") + " …"
	case e.Scope == "command":
		return e.Prefix + " …"
	}
	return e.Path
}

// shown is s for a terminal: "-" when empty, quoted when it holds
// anything but printable text (a remembered command line is an agent's
// words, and may hold escape sequences).
func shown(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || r == '\t' }) >= 0:
		return strconv.QuoteToGraphic(s)
	}
	return s
}

func runCancel(args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{errors.New("cancel takes one invocation id")}
	}
	return withBus(*natsURL, "toolbus-cancel", func(ctx context.Context, b *bus.Bus) error {
		data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: cli.Identity("cli")}, InvocationID: rest[0]})
		if err != nil {
			return err
		}
		// Every executor hears a cancel; the one running the call answers.
		inbox := b.Conn().NewRespInbox()
		sub, err := b.Conn().SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := b.Conn().PublishRequest(events.Request(events.SubjectCancel), inbox, data); err != nil {
			return err
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			m, err := sub.NextMsg(time.Until(deadline))
			if err != nil {
				break
			}
			if string(m.Data) == "cancelled" {
				fmt.Println("cancelled", rest[0])
				return nil
			}
		}
		return fmt.Errorf("no executor is running invocation %s", rest[0])
	})
}
