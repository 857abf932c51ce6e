package clustertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// TestClusterTLS runs the cluster with its links over TLS, with node
// certificates from `junction cert dev --node ID` and the cluster
// secret (every other test runs them in plain TCP, --cluster-insecure):
// a node's cluster listener speaks TLS with client certificates, and a
// durable message sent through one node to a queue another node leads
// is received through the third.
func TestClusterTLS(t *testing.T) { clusterTLS(t, proxyNet(t)) }

func TestClusterNetnsTLS(t *testing.T) { clusterTLS(t, netnsNet(t)) }

func clusterTLS(t *testing.T, nw Network) {
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	c := StartTLS(t, nw)
	dir := c.TLSDir()

	// The cluster listener: TLS 1.3, a node certificate of the cluster's
	// CA, and none without a client certificate of it.
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.pem")
	}
	mine, err := tls.LoadX509KeyPair(filepath.Join(dir, "node-2.pem"), filepath.Join(dir, "node-2-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	// wait bounds the read after the handshake (the listener drops a
	// peer silent for 5 s: transport.DefaultHandshakeTimeout).
	handshake := func(certs []tls.Certificate, wait time.Duration) (tls.ConnectionState, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		raw, err := nw.Dial(ctx, c.Nodes[1].Addrs.Cluster)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(4 * time.Second))
		host, _, _ := net.SplitHostPort(c.Nodes[1].Addrs.Cluster)
		tc := tls.Client(raw, &tls.Config{RootCAs: pool, Certificates: certs, ServerName: host})
		if err := tc.Handshake(); err != nil {
			return tls.ConnectionState{}, err
		}
		// With TLS 1.3 the server's verdict on the client's certificate
		// comes after the handshake: a refusal is an alert on the first
		// read; an accepted peer waits for the cluster's hello.
		raw.SetDeadline(time.Now().Add(wait))
		if _, err := tc.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			return tc.ConnectionState(), err
		}
		return tc.ConnectionState(), nil
	}
	st, err := handshake([]tls.Certificate{mine}, time.Second)
	if err != nil {
		t.Fatalf("TLS to node 1's cluster listener with node 2's certificate: %v", err)
	}
	if st.Version != tls.VersionTLS13 || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "junction-node-1" {
		t.Errorf("node 1's cluster listener: TLS version %x, peer %v; want TLS 1.3 and junction-node-1", st.Version, st.PeerCertificates)
	}
	if _, err := handshake(nil, 4*time.Second); err == nil {
		t.Error("node 1's cluster listener accepted a TLS client without a certificate")
	} else {
		c.Event("a TLS client without a certificate: %v", err)
	}

	// A durable message through the links: sent through one node to the
	// queue of a group another node leads, received through the third.
	leaders := c.WaitHealthy(30 * time.Second)
	var g uint64 = 1
	l := leaders[g]
	from, to := l%3+1, (l+1)%3+1
	q := queueIn(g, "ct.tls")
	c.CreateQueue(q)
	stomp := func(id uint64) *gostomp.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nc, err := nw.Dial(ctx, c.Nodes[id].Addrs.STOMP)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		sc, err := gostomp.Connect(nc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
		if err != nil {
			t.Fatalf("STOMP connect to node %d: %v", id, err)
		}
		return sc
	}
	sc := stomp(from)
	const body = "over TLS"
	if err := sc.Send("/queue/"+q, "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatalf("send through node %d: %v", from, err)
	}
	sc.Disconnect()
	c.Event("sent to %s (group %d, led by node %d) through node %d; receiving through node %d", q, g, l, from, to)
	rc := stomp(to)
	sub, err := rc.Subscribe("/queue/"+q, gostomp.AckClientIndividual)
	if err != nil {
		t.Fatalf("subscribe through node %d: %v", to, err)
	}
	select {
	case m := <-sub.C:
		if m.Err != nil {
			t.Fatalf("receive through node %d: %v", to, m.Err)
		}
		if string(m.Body) != body {
			t.Fatalf("received %q, want %q", m.Body, body)
		}
		if err := rc.Ack(m); err != nil {
			t.Fatalf("ack through node %d: %v", to, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("nothing received through node %d within 20s\n%s", to, c.LogExcerpts())
	}
	rc.Disconnect()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
