package busnode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/auth"
)

// Cluster makes the embedded server a node of a NATS cluster.
type Cluster struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is host:port for the routes of the other nodes.
	Listen string
	// Routes are the other nodes' route URLs (nats-route://host:port);
	// a node may list itself.
	Routes []string
	// ServerName names this node, unique in the cluster; defaults to
	// the cluster name and Listen's port.
	ServerName string
	// Secret, when set, is what the nodes' routes authenticate with
	// (auth.RouteSecret): a node that does not show it cannot join.
	Secret string
	// TLSCertFile and TLSKeyFile, when set, make the routes speak TLS
	// only, this node showing that certificate (for both ends of a
	// route: server and client use), and TLSCAFile the CA whose
	// certificates the other nodes must show.
	TLSCertFile, TLSKeyFile, TLSCAFile string
}

// clusterOptions makes opts a node of cluster c.
func clusterOptions(opts *server.Options, c Cluster) error {
	if c.Listen == "" {
		return errors.New("cluster: no listen address for routes")
	}
	host, portText, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("cluster listen address %q: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return fmt.Errorf("cluster listen address %q: the other nodes need a fixed port", c.Listen)
	}
	opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
	if c.Secret != "" {
		// Incoming routes must show it; outgoing ones show it.
		opts.Cluster.Username, opts.Cluster.Password = auth.RouteUser, c.Secret
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile != "" && c.TLSCAFile != "":
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, CaFile: c.TLSCAFile, Verify: true})
		if err != nil {
			return fmt.Errorf("cluster routes: TLS: %w", err)
		}
		// As nats-server's own config does for routes: strict, and a
		// node is a client of the others too, checked against the CA.
		tc.ClientAuth, tc.RootCAs = tls.RequireAndVerifyClientCert, tc.ClientCAs
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 2
	case c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != "":
		return errors.New("cluster routes: TLS needs the node's certificate, its key and the CA of the nodes' certificates")
	}
	for _, r := range c.Routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" {
			return fmt.Errorf("cluster route %q: want nats-route://host:port", r)
		}
		if c.Secret != "" {
			u.User = url.UserPassword(auth.RouteUser, c.Secret)
		}
		opts.Routes = append(opts.Routes, u)
	}
	opts.ServerName = c.ServerName
	if opts.ServerName == "" {
		// Unique per node, and the same at every start of it: JetStream
		// knows its peers by name.
		opts.ServerName = c.Name + "-" + portText
	}
	return nil
}
