package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/internal/ledger"
)

// TestCrashKill9MQTT is the crash test for MQTT: a persistent session
// (clean session false) subscribes at QoS 1 and goes away; publishers
// send QoS 1 messages, each confirmed by its PUBACK; the broker is killed
// with SIGKILL at a random moment and restarted; the device reconnects
// and drains its session. Every confirmed message must arrive (lost = 0),
// byte for byte (corrupt = 0), and nothing unsent (unexpected = 0); the
// device's CONNACK after the restart says its session is present
// [MQTT-3.2.2-2].
func TestCrashKill9MQTT(t *testing.T) {
	bin, data, conf, rounds, ev := crashSetup(t, "")
	total := 0
	for round := range rounds {
		total += crashRoundMQTT(t, bin, data, conf, round, ev)
	}
	t.Logf("%d rounds: %d QoS 1 messages confirmed by PUBACK; lost=0 unexpected=0 corrupt=0", rounds, total)
}

func mqttConnect(t *testing.T, addr, id string, clean bool, h paho.MessageHandler) (paho.Client, error) {
	c, _, err := mqttConnectSP(t, addr, id, clean, h)
	return c, err
}

// mqttConnectSP is mqttConnect that also reports CONNACK's session
// present flag.
func mqttConnectSP(t *testing.T, addr, id string, clean bool, h paho.MessageHandler) (paho.Client, bool, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetWriteTimeout(5 * time.Second).SetDefaultPublishHandler(h)
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, false, fmt.Errorf("connect %s: timeout", id)
	}
	return c, tok.(*paho.ConnectToken).SessionPresent(), tok.Error()
}

func crashRoundMQTT(t *testing.T, bin, data, conf string, round int, ev *journalEvents) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	p := startProcMQTT(t, bin, data, conf, ev)
	device := fmt.Sprintf("device-%d", round)
	topic := fmt.Sprintf("crash/%d", round)
	dev, err := mqttConnect(t, p.mqttAddr, device, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok := dev.Subscribe(topic, 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	dev.Disconnect(100)

	var mu sync.Mutex
	sent := map[string]string{}
	confirmed := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for pi := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := mqttConnect(t, p.mqttAddr, fmt.Sprintf("pub-%d-%d", round, pi), true, nil)
			if err != nil {
				return
			}
			defer c.Disconnect(0)
			for seq := 0; seq < 1_000_000; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				body := ledger.Payload(round*3+pi, seq)
				key, _, _, _ := ledger.PayloadKey([]byte(body))
				mu.Lock()
				sent[key] = body
				mu.Unlock()
				tok := c.Publish(topic, 1, false, body)
				if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
					return // the broker died: unconfirmed
				}
				mu.Lock()
				confirmed[key] = true
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
	p.kill(t)
	close(stop)
	wg.Wait()

	p2 := startProcMQTT(t, bin, data, conf, ev)
	got := make(chan paho.Message, 100000)
	dev, present, err := mqttConnectSP(t, p2.mqttAddr, device, false, func(_ paho.Client, m paho.Message) { got <- m })
	if err != nil {
		t.Fatalf("reconnect: %v\n%s", err, p2.log())
	}
	if !present {
		t.Fatalf("round %d: session present 0 after kill -9\n%s", round, p2.log())
	}
	received := map[string]int{}
	var unexpected, corrupt int
drain:
	for {
		select {
		case m := <-got:
			key, _, _, ok := ledger.PayloadKey(m.Payload())
			want, wasSent := sent[key]
			switch {
			case !ok || !wasSent:
				unexpected++
			case string(m.Payload()) != want:
				corrupt++
			}
			received[key]++
		case <-time.After(2 * time.Second):
			break drain
		}
	}
	lost := 0
	for key := range confirmed {
		if received[key] == 0 {
			lost++
		}
	}
	dev.Disconnect(100)
	p2.stop(t)
	t.Logf("round %d: %d sent, %d confirmed, %d delivered after the restart", round, len(sent), len(confirmed), len(received))
	if lost+unexpected+corrupt > 0 {
		t.Fatalf("round %d: lost=%d unexpected=%d corrupt=%d\n%s", round, lost, unexpected, corrupt, p2.log())
	}
	if len(confirmed) == 0 {
		t.Fatalf("round %d: nothing confirmed before the kill\n%s", round, p.log())
	}
	return len(confirmed)
}
