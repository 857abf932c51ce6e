package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/internal/minica"
)

// writeCerts writes a CA's server certificate for loopback, its key and
// the CA into dir and returns the CA and the paths.
func writeCerts(t *testing.T, dir string) (ca *minica.CA, cert, key, caFile string) {
	t.Helper()
	ca, err := minica.NewCA("junction test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("localhost", "127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, caFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	for path, data := range map[string][]byte{cert: srv.CertPEM, key: srv.KeyPEM, caFile: ca.CertPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key, caFile
}

// exchange proves a STOMP subscriber gets what STOMP, MQTT and AMQP
// clients send, each dialled through the given functions.
func exchange(t *testing.T, stompConn, mqttConn, amqpConn func() net.Conn, mqttURL string, mqttTLS *tls.Config) {
	t.Helper()
	st, err := gostomp.Connect(stompConn(), gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatalf("stomp: %v", err)
	}
	defer st.Disconnect()
	// ports.<subtest>: one address, written a/b in MQTT.
	leaf := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())
	topic := "ports." + leaf
	sub, err := st.Subscribe("/topic/"+topic, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/topic/"+topic, "text/plain", []byte("stomp"), nil); err != nil {
		t.Fatal(err)
	}

	opts := paho.NewClientOptions().AddBroker(mqttURL).SetClientID("ports-" + topic).SetAutoReconnect(false).SetConnectRetry(false)
	if mqttTLS != nil {
		opts.SetTLSConfig(mqttTLS)
	}
	if mqttConn != nil {
		opts.SetCustomOpenConnectionFn(func(_ *url.URL, _ paho.ClientOptions) (net.Conn, error) { return mqttConn(), nil })
	}
	mq := paho.NewClient(opts)
	if tok := mq.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer mq.Disconnect(100)
	if tok := mq.Publish("ports/"+leaf, 1, false, "mqtt"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ac, err := goamqp.NewConn(ctx, amqpConn(), nil)
	if err != nil {
		t.Fatalf("amqp: %v", err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "topic://"+topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("amqp")), nil); err != nil {
		t.Fatal(err)
	}

	want := map[string]bool{"stomp": true, "mqtt": true, "amqp": true}
	for len(want) > 0 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			delete(want, string(m.Body))
		case <-time.After(5 * time.Second):
			t.Fatalf("missing %v", want)
		}
	}
}

func dialer(t *testing.T, addr string, cfg *tls.Config) func() net.Conn {
	return func() net.Conn {
		t.Helper()
		var c net.Conn
		var err error
		if cfg != nil {
			c, err = tls.Dial("tcp", addr, cfg)
		} else {
			c, err = net.Dial("tcp", addr)
		}
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		return c
	}
}

// Every protocol on the one port, plain and TLS, and on its own TLS
// port; STOMP over WebSockets on the one port.
func TestOnePortAndTLS(t *testing.T) {
	ca, cert, key, _ := writeCerts(t, t.TempDir())
	cfg := testConfig(t)
	cfg.TLS.Cert, cfg.TLS.Key = cert, key
	cfg.TLS.Stomp, cfg.TLS.MQTT, cfg.TLS.AMQP, cfg.TLS.WebSocket = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	startServe(t, cfg)
	addr := func(name string) string { return lastInstance.addrs[name].String() }
	clientTLS := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}

	t.Run("one port", func(t *testing.T) {
		all := addr("all")
		exchange(t, dialer(t, all, nil), nil, dialer(t, all, nil), "tcp://"+all, nil)
	})
	t.Run("one port over TLS", func(t *testing.T) {
		all := addr("all")
		exchange(t, dialer(t, all, clientTLS), dialer(t, all, clientTLS), dialer(t, all, clientTLS), "tcp://"+all, nil)
	})
	t.Run("own TLS ports", func(t *testing.T) {
		exchange(t, dialer(t, addr("stomp+tls"), clientTLS), nil, dialer(t, addr("amqp+tls"), clientTLS), "ssl://"+addr("mqtt+tls"), clientTLS)
	})
	t.Run("websockets", func(t *testing.T) {
		for _, u := range []string{"ws://" + addr("all") + "/stomp", "ws://" + addr("websocket") + "/stomp", "wss://" + addr("websocket+tls") + "/stomp", "wss://" + addr("all") + "/stomp"} {
			d := gws.Dialer{TLSClientConfig: clientTLS, Subprotocols: []string{"v12.stomp"}, HandshakeTimeout: 5 * time.Second}
			ws, resp, err := d.Dial(u, nil)
			if err != nil {
				t.Fatalf("%s: %v", u, err)
			}
			if resp.Header.Get("Sec-WebSocket-Protocol") != "v12.stomp" {
				t.Fatalf("%s: subprotocol %q", u, resp.Header.Get("Sec-WebSocket-Protocol"))
			}
			ws.WriteMessage(gws.TextMessage, []byte("CONNECT\naccept-version:1.2\nhost:/\n\n\x00"))
			ws.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, msg, err := ws.ReadMessage()
			if err != nil || !strings.HasPrefix(string(msg), "CONNECTED") {
				t.Fatalf("%s: %q %v", u, msg, err)
			}
			ws.Close()
		}
	})
	t.Run("untrusted server", func(t *testing.T) {
		if c, err := tls.Dial("tcp", addr("stomp+tls"), &tls.Config{ServerName: "127.0.0.1"}); err == nil {
			c.Close()
			t.Fatal("a client without the CA trusted the server")
		}
	})
	t.Run("garbage on the one port", func(t *testing.T) {
		c, err := net.Dial("tcp", addr("all"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte(strings.Repeat("\x07garbage ", 20)))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("garbage got %d bytes back", n)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("garbage was not closed")
		}
	})
}

// Client certificates: required and verified against the client CA; a
// certificate from another CA is refused.
func TestTLSClientCertificates(t *testing.T) {
	ca, cert, key, caFile := writeCerts(t, t.TempDir())
	cfg := testConfig(t)
	cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA, cfg.TLS.RequireClientCert = cert, key, caFile, true
	cfg.TLS.Stomp, cfg.TLS.AMQP = "127.0.0.1:0", "127.0.0.1:0"
	startServe(t, cfg)
	addr := lastInstance.addrs["stomp+tls"].String()
	good, err := ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := minica.NewCA("someone else")
	bad, err := other.Client("mallory")
	if err != nil {
		t.Fatal(err)
	}
	try := func(certs []tls.Certificate) error {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: certs})
		if err != nil {
			return err
		}
		defer c.Close()
		st, err := gostomp.Connect(c, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			return err
		}
		return st.Disconnect()
	}
	if err := try([]tls.Certificate{good.TLSCertificate()}); err != nil {
		t.Fatalf("trusted client certificate: %v", err)
	}

	// AMQP SASL EXTERNAL: the certificate's subject is the user, stamped
	// on what the client sends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc, err := tls.Dial("tcp", lastInstance.addrs["amqp+tls"].String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{good.TLSCertificate()}})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := goamqp.NewConn(ctx, tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal("")})
	if err != nil {
		t.Fatalf("SASL EXTERNAL: %v", err)
	}
	defer ac.Close()
	as := must[*goamqp.Session](t)(ac.NewSession(ctx, nil))
	snd := must[*goamqp.Sender](t)(as.NewSender(ctx, "queue://certs", nil))
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("signed")), nil); err != nil {
		t.Fatal(err)
	}
	rcv := must[*goamqp.Receiver](t)(as.NewReceiver(ctx, "queue://certs", nil))
	if m := amqpReceive(t, rcv); string(m.Properties.UserID) != "alice" {
		t.Fatalf("user-id %q, want the certificate's subject", m.Properties.UserID)
	}
	if err := try([]tls.Certificate{bad.TLSCertificate()}); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if err := try(nil); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
}
