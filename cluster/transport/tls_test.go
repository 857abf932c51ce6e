package transport

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/minica"
)

// nodeTLS issues node id's certificate from ca (valid as server and as
// client for 127.0.0.1) and returns a config trusting roots.
func nodeTLS(t testing.TB, ca *minica.CA, id uint64, roots *minica.CA) *tls.Config {
	t.Helper()
	c, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: fmt.Sprintf("node-%d", id)},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{c.TLSCertificate()}, RootCAs: roots.Pool()}
}

func TestMutualTLS(t *testing.T) {
	ca, err := minica.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := minica.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	la, lb := listen(t), listen(t)
	bAddr := lb.Addr().String()
	a := startNode(t, 1, la, map[uint64]string{2: bAddr}, func(c *Config) { c.TLS = nodeTLS(t, ca, 1, ca) })
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String(), 3: "127.0.0.1:1"}, func(c *Config) { c.TLS = nodeTLS(t, ca, 2, ca) })
	waitConnected(t, a, b)
	waitConnected(t, b, a)
	probe(t, a, b, LaneRaft)
	probe(t, b, a, LaneBulk)

	t.Run("client certificate from another CA", func(t *testing.T) {
		before := b.Stats().Refused["tls"]
		// Node 3 knows the secret and trusts the cluster CA, but its own
		// certificate is not the cluster's.
		c := startNode(t, 3, listen(t), map[uint64]string{2: bAddr}, func(c *Config) { c.TLS = nodeTLS(t, other, 3, ca) })
		waitFor(t, 20*time.Second, "a TLS refusal", func() bool { return b.Stats().Refused["tls"] > before })
		waitFor(t, 10*time.Second, "node 3's error", func() bool {
			return bytesContains(c.lane(2, LaneRaft).LastError, "certificate")
		})
		c.Close()
		if n := b.sink.count(3, LaneRaft); n != 0 {
			t.Errorf("node 2 took %d frames from a node with a foreign certificate", n)
		}
		probe(t, a, b, LaneRaft)
	})
	t.Run("server certificate from another CA", func(t *testing.T) {
		// Node 3 has a good certificate but trusts only another CA: it
		// must not accept node 2's certificate.
		c := startNode(t, 3, listen(t), map[uint64]string{2: bAddr}, func(c *Config) { c.TLS = nodeTLS(t, ca, 3, other) })
		waitFor(t, 20*time.Second, "node 3's error", func() bool {
			return bytesContains(c.lane(2, LaneRaft).LastError, "certificate signed by unknown authority")
		})
		if c.lane(2, LaneRaft).Connected {
			t.Error("node 3 connected to a server it cannot verify")
		}
		c.Close()
	})
	t.Run("plain TCP to a TLS node", func(t *testing.T) {
		before := b.Stats().Refused["tls"]
		c := startNode(t, 3, listen(t), map[uint64]string{2: bAddr}, nil)
		waitFor(t, 20*time.Second, "a TLS refusal", func() bool { return b.Stats().Refused["tls"] > before })
		c.Close()
		if n := b.sink.count(3, LaneRaft); n != 0 {
			t.Errorf("node 2 took %d frames over plain TCP", n)
		}
	})
}

func TestTLSConfigChecked(t *testing.T) {
	ca, err := minica.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	good := nodeTLS(t, ca, 1, ca)
	for name, c := range map[string]*tls.Config{
		"no CA":          {Certificates: good.Certificates},
		"no certificate": {RootCAs: ca.Pool()},
	} {
		_, err := New(Config{NodeID: 1, Listen: "127.0.0.1:0", Secret: testSecret, Handler: func(uint64, Lane, []byte) {}, TLS: c})
		if err == nil {
			t.Errorf("%s: New accepted the TLS config", name)
		}
	}
}
