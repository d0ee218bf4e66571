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
	// secret is the secret read by check.
	secret []byte
}

func addWebhookFlags(fs *pflag.FlagSet) *webhookFlags {
	return &webhookFlags{
		url:        fs.String("webhook", "", "URL to POST a signed JSON notice to for each call that waits for a person, with a link to it in the console (docs/approvals.md)"),
		secretFile: fs.String("webhook-secret-file", "", "file (mode 0600) holding the secret the webhook's notices are signed with (HMAC-SHA256); required with --webhook"),
		link:       fs.String("webhook-link", "", "the console's address as people open it, for the notices' links (default: the address the console listens on)"),
	}
}

// check reports a flag given without the others it needs, and reads the
// secret, before anything starts: a bad file stops the command at once.
func (f *webhookFlags) check() error {
	switch {
	case *f.url == "" && (*f.secretFile != "" || *f.link != ""):
		return errors.New("--webhook-secret-file and --webhook-link go with --webhook")
	case *f.url == "":
		return nil
	case *f.secretFile == "":
		return errors.New("--webhook needs --webhook-secret-file: the notices are signed, so that a receiver can tell them from forgeries")
	}
	secret, err := notify.ReadSecret(*f.secretFile)
	if err != nil {
		return err
	}
	// The URLs are checked now too; the console's own address, the
	// link's default, is known only once it listens.
	cfg := notify.Config{URL: *f.url, Secret: secret, Console: *f.link}
	if err := cfg.Validate(); err != nil {
		return err
	}
	f.secret = secret
	return nil
}

// start notifies the webhook of the requests src follows, with links to
// the console at consoleURL (unless --webhook-link names another), until
// stop is called; nothing when no --webhook was given. check has passed.
// A notice that fails is logged and changes nothing for the call it is
// about.
func (f *webhookFlags) start(src notify.Source, consoleURL string, log *slog.Logger) (stop func(), err error) {
	if *f.url == "" {
		return func() {}, nil
	}
	link := *f.link
	if link == "" {
		link = consoleURL
	}
	n, err := notify.New(notify.Config{URL: *f.url, Secret: f.secret, Console: link, Logger: log})
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
