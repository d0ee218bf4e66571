package main

import (
	"errors"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/console"
)

// oidcFlags are the console's flags for signing people in with the
// organization's OpenID provider.
type oidcFlags struct {
	issuer, clientID, secretFile, groupsClaim, redirect *string
	scopes                                              *[]string
	cfg                                                 *console.OIDC // set by check
}

func addOIDCFlags(fs *pflag.FlagSet) *oidcFlags {
	return &oidcFlags{
		issuer:      fs.String("oidc-issuer", "", "sign people in with this OpenID provider (issuer URL); the console's token then answers nothing (docs/approvals.md)"),
		clientID:    fs.String("oidc-client-id", "", "the console's client id at the provider; required with --oidc-issuer"),
		secretFile:  fs.String("oidc-client-secret-file", "", "file (mode 0600) holding the client's secret; required with --oidc-issuer"),
		groupsClaim: fs.String("oidc-groups-claim", console.DefaultGroupsClaim, "the ID token's claim that lists the person's groups"),
		redirect:    fs.String("oidc-redirect-url", "", "the console's /auth/callback as browsers reach it, registered at the provider (default: the address the console listens on)"),
		scopes:      fs.StringSlice("oidc-scope", nil, "a scope to ask for beside openid, email and profile (e.g. groups); repeatable"),
	}
}

// check reports a flag given without the others it needs, and reads the
// secret, before anything starts: a bad file stops the command at once.
func (f *oidcFlags) check() error {
	switch {
	case *f.issuer == "" && (*f.clientID != "" || *f.secretFile != "" || *f.redirect != "" || len(*f.scopes) > 0):
		return errors.New("--oidc-client-id, --oidc-client-secret-file, --oidc-redirect-url and --oidc-scope go with --oidc-issuer")
	case *f.issuer == "":
		return nil
	case *f.clientID == "" || *f.secretFile == "":
		return errors.New("--oidc-issuer needs --oidc-client-id and --oidc-client-secret-file")
	}
	for _, u := range []string{*f.issuer, *f.redirect} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return errors.New("--oidc-issuer and --oidc-redirect-url must be http(s) URLs: " + u)
		}
	}
	secret, err := console.ReadClientSecret(*f.secretFile)
	if err != nil {
		return err
	}
	f.cfg = &console.OIDC{Issuer: *f.issuer, ClientID: *f.clientID, ClientSecret: secret, RedirectURL: *f.redirect,
		GroupsClaim: *f.groupsClaim, Scopes: *f.scopes}
	return nil
}
