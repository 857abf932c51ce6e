package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

func largeBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// Large messages cross protocols without being assembled: a STOMP body
// above the threshold (and above the STOMP frame limit) reaches an AMQP
// receiver, split into frames from its file, and an AMQP one a STOMP
// subscriber; a STOMP one an MQTT subscriber and an MQTT one an AMQP
// receiver (above the MQTT packet limit); over TCP and over WebSockets. The console's browse shows
// the size and the start of a large body, read by reference. The files
// go once the messages are acked.
func TestLargeMessagesCrossProtocol(t *testing.T) {
	cfg := testConfig(t)
	startServe(t, cfg)
	console := "http://" + lastInstance.addrs["console"].String()
	for _, d := range mxDialers() {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sc, err := gostomp.Connect(d.conn(t, mxSTOMP), gostomp.ConnOpt.HeartBeat(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Disconnect()
			ac, err := goamqp.NewConn(ctx, d.conn(t, mxAMQP), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			as, err := ac.NewSession(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}

			// STOMP → AMQP, 12 MiB: more than stomp.max-frame-size.
			q := "large.s2a." + d.name
			body := largeBody(12<<20 + 5)
			if err := sc.Send("/queue/"+q, "application/octet-stream", body, gostomp.SendOpt.Receipt,
				gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header("kind", "big")); err != nil {
				t.Fatal(err)
			}
			var page struct {
				Messages []struct {
					Size      int64  `json:"size"`
					Body      string `json:"body"`
					Truncated bool   `json:"truncated"`
				} `json:"messages"`
			}
			resp, err := http.Get(console + "/api/v1/queues/" + q + "/messages")
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil || len(page.Messages) != 1 {
				t.Fatalf("browse: %v %+v", err, page)
			}
			if m := page.Messages[0]; m.Size != int64(len(body)) || !m.Truncated || m.Body != string(body[:len(m.Body)]) || len(m.Body) == 0 || len(m.Body) > 4096 {
				t.Fatalf("browse: size %d truncated %v body of %d bytes", m.Size, m.Truncated, len(m.Body))
			}
			r, err := as.NewReceiver(ctx, q, nil)
			if err != nil {
				t.Fatal(err)
			}
			am, err := r.Receive(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(am.GetData()) != sha256.Sum256(body) || am.ApplicationProperties["kind"] != "big" {
				t.Fatalf("STOMP to AMQP: %d bytes, properties %v", len(am.GetData()), am.ApplicationProperties)
			}
			if err := r.AcceptMessage(ctx, am); err != nil {
				t.Fatal(err)
			}
			r.Close(ctx)

			// AMQP → STOMP, 20 MiB.
			q = "large.a2s." + d.name
			body = largeBody(20<<20 + 7)
			snd, err := as.NewSender(ctx, q, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := goamqp.NewMessage(body)
			m.Header = &goamqp.MessageHeader{Durable: true}
			m.Properties = &goamqp.MessageProperties{ContentType: ptrTo("application/octet-stream")}
			if err := snd.Send(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			sub, err := sc.Subscribe("/queue/"+q, gostomp.AckClient)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case sm := <-sub.C:
				if sm.Err != nil {
					t.Fatal(sm.Err)
				}
				if sha256.Sum256(sm.Body) != sha256.Sum256(body) || sm.ContentType != "application/octet-stream" {
					t.Fatalf("AMQP to STOMP: %d bytes, content type %q", len(sm.Body), sm.ContentType)
				}
				if err := sc.Ack(sm); err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("no STOMP message")
			}
			sub.Unsubscribe()

			// STOMP → MQTT and MQTT → AMQP, 12 MiB each, through
			// topics (multicast).
			mc := newMQTT3Endpoint(t, d).(*mqtt3Endpoint)
			got := make(chan []byte, 1)
			topic := "large/s2m/" + d.name
			if err := mqttWait(mc.rcv.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { got <- m.Payload() })); err != nil {
				t.Fatal(err)
			}
			body = largeBody(12<<20 + 11)
			if err := sc.Send("/topic/large.s2m."+d.name, "", body, gostomp.SendOpt.Receipt); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-got:
				if sha256.Sum256(p) != sha256.Sum256(body) {
					t.Fatalf("STOMP to MQTT: %d bytes", len(p))
				}
			case <-ctx.Done():
				t.Fatal("no MQTT message")
			}
			r, err = as.NewReceiver(ctx, "topic://large.m2a."+d.name, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tok := mc.snd.Publish("large/m2a/"+d.name, 1, false, body); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				t.Fatalf("MQTT publish: %v", tok.Error())
			}
			am, err = r.Receive(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(am.GetData()) != sha256.Sum256(body) {
				t.Fatalf("MQTT to AMQP: %d bytes", len(am.GetData()))
			}
			r.AcceptMessage(ctx, am)
			r.Close(ctx)
		})
	}
	dir := filepath.Join(cfg.DataDir, "large")
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		es, err := os.ReadDir(dir)
		if err == nil && len(es) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("large files left after the acks: %v", fmt.Sprint(es))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
