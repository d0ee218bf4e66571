package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/events"
)

// shownNames is how many tool names a discovery's line lists.
const shownNames = 8

// commandDiscover asks every executor with a discovery command to run it
// again (seed 000 discoverAllTools, for the command's tools), all at once,
// and prints what each found.
func commandDiscover(natsURL string, force, asJSON bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), discovery.DiscoveryTimeout+time.Minute)
	defer cancel()
	log, _ := cli.Logger("warn")
	b, err := cli.Connect(ctx, natsURL, "toolbus-tools", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	states, malformed, err := discovery.ReadStatus(ctx, b.JetStream())
	for _, m := range malformed {
		fmt.Fprintf(os.Stderr, "toolbus: ignoring a malformed %v\n", m)
	}
	if err != nil {
		return err
	}
	if len(states) == 0 {
		return errors.New("no executor has a discovery command (tools.discoveryCommand in the settings.json given to toolbus up or executor --settings)")
	}
	replies := make([]*events.DiscoverReply, len(states))
	var wg sync.WaitGroup
	for i, st := range states {
		wg.Go(func() {
			reply, err := askDiscover(ctx, b.Conn(), st.Executor, force)
			if err != nil {
				reply = &events.DiscoverReply{Error: err.Error()}
			}
			reply.Sender.ID = st.Executor
			replies[i] = reply
		})
	}
	wg.Wait()
	failed := false
	for _, r := range replies {
		failed = failed || r.Error != ""
	}
	if asJSON {
		if err := writeJSON(os.Stdout, replies); err != nil {
			return err
		}
	} else {
		for _, r := range replies {
			printDiscovery(r)
		}
	}
	if failed {
		return errors.New("discovery failed on some executors")
	}
	return nil
}

// askDiscover sends one executor a DiscoverRequest.
func askDiscover(ctx context.Context, nc *nats.Conn, executor string, force bool) (*events.DiscoverReply, error) {
	data, err := events.Encode(&events.DiscoverRequest{Header: events.Header{Sender: cli.Identity("cli")}, Force: force})
	if err != nil {
		return nil, err
	}
	// The audit stream captures the request subject, so a request to an
	// executor that is gone (its status entry not expired yet) would wait
	// out the whole timeout: ask first on its claim subject, which no
	// stream captures.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = nc.RequestWithContext(pctx, events.ClaimSubject(executor), []byte("presence"))
	cancel()
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, errors.New("the executor is not running (its status has not expired yet)")
	}
	msg, err := nc.RequestWithContext(ctx, events.DiscoverSubject(executor), data)
	if err != nil {
		return nil, err
	}
	return events.Decode[events.DiscoverReply](msg.Data)
}

func printDiscovery(r *events.DiscoverReply) {
	if r.Error != "" {
		fmt.Printf("%s: discovery failed: %s\n", r.Sender.ID, r.Error)
		if len(r.Tools) > 0 {
			fmt.Printf("  %d discovered tools stay as they were\n", len(r.Tools))
		}
	} else {
		names := r.Tools
		more := ""
		if len(names) > shownNames {
			more = fmt.Sprintf(", … (%d more)", len(names)-shownNames)
			names = names[:shownNames]
		}
		from := ""
		if r.Cached && r.CachedAt != nil {
			from = fmt.Sprintf(" (cached, discovered at %s; --force to run the command)", r.CachedAt.Local().Format(time.TimeOnly))
		}
		fmt.Printf("%s: %d tools%s: %s%s\n", r.Sender.ID, len(r.Tools), from, strings.Join(names, ", "), more)
	}
	for _, w := range r.Warnings {
		fmt.Printf("  warning: %s\n", w)
	}
}
