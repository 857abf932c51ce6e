package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/internal/ledger"
)

// TestCrashKill9AMQP is the crash test for AMQP 1.0: go-amqp senders
// send durable messages to a queue, unsettled, each confirmed by its
// accepted disposition; the broker is killed with SIGKILL at a random
// moment and restarted; a receiver drains the queue. Every confirmed
// message must arrive (lost = 0), byte for byte (corrupt = 0), and
// nothing unsent (unexpected = 0). Every message delivered after the
// restart may have been delivered before the kill, so each must be
// flagged as a possible redelivery the way AMQP clients read it:
// delivery-count ≥ 1 and first-acquirer false (unflagged = 0).
func TestCrashKill9AMQP(t *testing.T) {
	bin, data, conf, rounds, ev := crashSetup(t, "")
	total := 0
	for round := range rounds {
		total += crashRoundAMQP(t, bin, data, conf, round, ev)
	}
	t.Logf("%d rounds: %d durable AMQP messages confirmed by accepted; lost=0 unexpected=0 corrupt=0 unflagged=0", rounds, total)
}

func amqpDial(addr string) (*goamqp.Conn, *goamqp.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, nil)
	if err != nil {
		return nil, nil, err
	}
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

func crashRoundAMQP(t *testing.T, bin, data, conf string, round int, ev *journalEvents) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	p := startProcAMQP(t, bin, data, conf, ev)
	queue := fmt.Sprintf("queue://crash.amqp.%d", round)

	var mu sync.Mutex
	sent := map[string]string{}
	confirmed := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for si := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, s, err := amqpDial(p.amqpAddr)
			if err != nil {
				return
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			snd, err := s.NewSender(ctx, queue, nil)
			cancel()
			if err != nil {
				return
			}
			for seq := 0; seq < 1_000_000; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				body := ledger.Payload(round*3+si, seq)
				key, _, _, _ := ledger.PayloadKey([]byte(body))
				mu.Lock()
				sent[key] = body
				mu.Unlock()
				m := &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := snd.Send(ctx, m, nil)
				cancel()
				if err != nil {
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

	p2 := startProcAMQP(t, bin, data, conf, ev)
	c, s, err := amqpDial(p2.amqpAddr)
	if err != nil {
		t.Fatalf("reconnect: %v\n%s", err, p2.log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rcv, err := s.NewReceiver(ctx, queue, &goamqp.ReceiverOptions{Credit: 500})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	received := map[string]int{}
	var unexpected, corrupt, unflagged int
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := rcv.Receive(ctx, nil)
		cancel()
		if err != nil {
			break
		}
		body := m.GetData()
		key, _, _, ok := ledger.PayloadKey(body)
		want, wasSent := sent[key]
		switch {
		case !ok || !wasSent:
			unexpected++
		case string(body) != want:
			corrupt++
		}
		if h := m.Header; h == nil || h.DeliveryCount < 1 || h.FirstAcquirer {
			unflagged++
		}
		received[key]++
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		rcv.AcceptMessage(ctx, m)
		cancel()
	}
	lost := 0
	for key := range confirmed {
		if received[key] == 0 {
			lost++
		}
	}
	c.Close()
	p2.stop(t)
	t.Logf("round %d: %d sent, %d confirmed, %d delivered after the restart", round, len(sent), len(confirmed), len(received))
	if lost+unexpected+corrupt+unflagged > 0 {
		t.Fatalf("round %d: lost=%d unexpected=%d corrupt=%d unflagged=%d\n%s", round, lost, unexpected, corrupt, unflagged, p2.log())
	}
	if len(confirmed) == 0 {
		t.Fatalf("round %d: nothing confirmed before the kill\n%s", round, p.log())
	}
	return len(confirmed)
}
