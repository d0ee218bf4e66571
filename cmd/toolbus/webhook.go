package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/notify"
)

// webhookFlags are the flags of a command that notifies a webhook of the
// calls that wait for a person (up, console).
type webhookFlags struct {
	url, secretFile, link *string
}

func addWebhookFlags(fs *pflag.FlagSet) *webhookFlags {
	return &webhookFlags{
		url:        fs.String("webhook", "", "URL to POST a signed JSON notice to for each call that waits for a person, with a link to it in the console (docs/approvals.md)"),
		secretFile: fs.String("webhook-secret-file", "", "file (mode 0600) holding the secret the webhook's notices are signed with (HMAC-SHA256); required with --webhook"),
		link:       fs.String("webhook-link", "", "the console's address as people open it, for the notices' links (default: the address the console listens on)"),
	}
}

// check reports a flag given without the others it needs.
func (f *webhookFlags) check() error {
	switch {
	case *f.url == "" && (*f.secretFile != "" || *f.link != ""):
		return errors.New("--webhook-secret-file and --webhook-link go with --webhook")
	case *f.url != "" && *f.secretFile == "":
		return errors.New("--webhook needs --webhook-secret-file: the notices are signed, so that a receiver can tell them from forgeries")
	}
	return nil
}

// start notifies the webhook of the requests src follows, with links to
// the console at consoleURL (unless --webhook-link names another), until
// stop is called; nothing when no --webhook was given. A notice that
// fails is logged and changes nothing for the call it is about.
func (f *webhookFlags) start(src notify.Source, consoleURL string, log *slog.Logger) (stop func(), err error) {
	if *f.url == "" {
		return func() {}, nil
	}
	secret, err := notify.ReadSecret(*f.secretFile)
	if err != nil {
		return nil, err
	}
	link := *f.link
	if link == "" {
		link = consoleURL
	}
	n, err := notify.New(notify.Config{URL: *f.url, Secret: secret, Console: link, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx, src)
	}()
	return func() { cancel(); <-done }, nil
}
