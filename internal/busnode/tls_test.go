package busnode_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// pki writes a CA, a certificate for 127.0.0.1 and a client certificate,
// all signed by the CA, into dir, and returns their files.
func pki(t *testing.T, dir string) (ca, cert, key, clientCert, clientKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolbus test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	caKeyDER, _ := x509.MarshalECPrivateKey(caKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kd)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	write("ca-key.pem", "EC PRIVATE KEY", caKeyDER)
	cert, key = issue("server", 2, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// An embedded bus with a certificate speaks TLS only: a part that trusts
// its CA connects, one that does not is refused; with a client CA, only a
// part showing a certificate it signed connects. The bus's own parts,
// in its process, are not affected.
func TestAnEmbeddedBusSpeaksTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key, clientCert, clientKey := pki(t, dir)
	connect := func(url string, cfg bus.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg.URL, cfg.Logger = url, bustest.Quiet()
		c, err := bus.Connect(ctx, cfg)
		if err == nil {
			bustest.Stop(t, c)
		}
		return err
	}
	for _, mutual := range []bool{false, true} {
		cfg := busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: bustest.Quiet(), TLSCertFile: cert, TLSKeyFile: key}
		if mutual {
			cfg.TLSClientCAFile = ca
		}
		b, err := busnode.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := connect(b.URL(), bus.Config{}); err == nil {
			t.Errorf("mutual %v: a part that does not trust the CA connected", mutual)
		}
		if err := connect(b.URL(), bus.Config{CAFile: ca}); (err == nil) == mutual {
			t.Errorf("mutual %v: a part with the CA and no certificate: %v", mutual, err)
		}
		if err := connect(b.URL(), bus.Config{CAFile: ca, CertFile: clientCert, KeyFile: clientKey}); err != nil {
			t.Errorf("mutual %v: a part with the CA and a certificate: %v", mutual, err)
		}
		bustest.Stop(t, b)
	}
	if _, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: bustest.Quiet(), TLSClientCAFile: ca}); err == nil {
		t.Error("a client CA without the server's certificate was taken")
	}
}

// The routes of a cluster with certificates speak TLS only: the nodes
// that show a certificate of the CA make the cluster; one that knows the
// routes and the secret but speaks plain is refused.
func TestClusterRoutesSpeakTLS(t *testing.T) {
	dir := t.TempDir()
	ca, _, _, _, _ := pki(t, dir)
	node, nodeKey := nodeCert(t, dir, ca)
	const secret = "a-route-secret-long-enough-for-the-fleet-1234"
	var (
		mu     sync.Mutex // the nodes are configured at once
		routes []string
	)
	bustest.StartClusterWith(t, 3, 0, func(cfg *busnode.Config) {
		cfg.Cluster.Secret = secret
		cfg.Cluster.TLSCertFile, cfg.Cluster.TLSKeyFile, cfg.Cluster.TLSCAFile = node, nodeKey, ca
		mu.Lock()
		routes = cfg.Cluster.Routes
		mu.Unlock()
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plain, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: "plain", Logger: bustest.Quiet(),
		Cluster: busnode.Cluster{Name: "toolbus-test", Listen: listen, Routes: routes, ServerName: "plain", Secret: secret}})
	if err == nil {
		bustest.Stop(t, plain)
		t.Fatal("a node speaking plain on the routes joined a cluster whose routes speak TLS")
	}
	if _, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: bustest.Quiet(),
		Cluster: busnode.Cluster{Name: "c", Listen: listen, TLSCertFile: node}}); err == nil || !strings.Contains(err.Error(), "TLS needs") {
		t.Errorf("routes with a certificate and no key or CA: %v", err)
	}
}

// nodeCert issues a certificate for 127.0.0.1 usable at both ends of a
// route, signed by the CA pki wrote into dir.
func nodeCert(t *testing.T, dir, caFile string) (cert, key string) {
	t.Helper()
	caPEM, _ := os.ReadFile(caFile)
	block, _ := pem.Decode(caPEM)
	caCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(caKeyPEM)
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: "node"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	return cert, key
}
