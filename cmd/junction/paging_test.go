package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// pagingBytes is how much the paging test sends: JUNCTION_PAGING_BYTES
// (e.g. 1GiB, for `make paging-test`), else 96 MiB.
func pagingBytes(t *testing.T) int64 {
	if s := os.Getenv("JUNCTION_PAGING_BYTES"); s != "" {
		n, err := ParseByteSize(s)
		if err != nil {
			t.Fatal(err)
		}
		return int64(n)
	}
	return 96 << 20
}

// procMemory reads a process's resident set (VmRSS) and its peak
// (VmHWM), in bytes.
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak
}

// The paging test runs the broker with a 32 MiB memory budget, sends it
// pagingBytes of durable 1 KiB messages nobody consumes (confirmed, so
// each is on disk), checks the broker's peak resident memory, then drains
// the queue and checks that every message arrives once, in each
// producer's order.
//
// The bound on resident memory is the budget plus a fixed overhead
// (pagingOverhead): the Go runtime and the broker's own structures, the
// journal's buffers and index for what is in memory, the producers'
// in-flight window, and the garbage collector's headroom.
const (
	pagingBudget   = 32 << 20
	pagingOverhead = 160 << 20
)

func TestPagingBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("paging test skipped in -short mode")
	}
	total := pagingBytes(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "paging.yaml")
	cfg := fmt.Sprintf("max-memory: %d\npersistence:\n  page-segment-size: 16MiB\n", pagingBudget)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcAMQP(t, bin, data, conf, &journalEvents{})
	defer p.kill(t)
	const (
		size      = 1024
		producers = 4
		window    = 32 // concurrent sends per producer connection
	)
	n := int(total / size)
	perProducer := n / producers
	queue := "queue://paging.test"

	var sent atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, producers*window)
	for pi := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, s, err := amqpDial(p.amqpAddr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			snd, err := s.NewSender(ctx, queue, nil)
			cancel()
			if err != nil {
				errs <- err
				return
			}
			// Each of window goroutines sends every window-th sequence
			// number: a producer's messages are in order per goroutine.
			var inner sync.WaitGroup
			for w := range window {
				inner.Add(1)
				go func() {
					defer inner.Done()
					for seq := w; seq < perProducer; seq += window {
						body := make([]byte, size)
						copy(body, fmt.Sprintf("%d-%d-%d-", pi, w, seq))
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{body}}, nil)
						cancel()
						if err != nil {
							errs <- fmt.Errorf("send %d-%d-%d: %w", pi, w, seq, err)
							return
						}
						sent.Add(1)
					}
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fill := time.Since(start)
	rss, peak := procMemory(t, p.cmd.Process.Pid)
	t.Logf("sent %d durable messages (%d MiB) in %v (%.0f/s); broker RSS %d MiB, peak %d MiB; budget %d MiB",
		sent.Load(), total>>20, fill.Round(time.Millisecond), float64(sent.Load())/fill.Seconds(), rss>>20, peak>>20, pagingBudget>>20)
	if !strings.Contains(p.log(), "queue paging to disk") {
		t.Fatalf("the queue never paged:\n%s", p.log())
	}

	// Drain: each (producer, goroutine) stream arrives in order, every
	// message once.
	c, s, err := amqpDial(p.amqpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rcv, err := s.NewReceiver(ctx, queue, &goamqp.ReceiverOptions{Credit: 1000})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	next := make(map[[2]int]int)
	start = time.Now()
	got := 0
	for got < int(sent.Load()) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := rcv.Receive(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v\n%s", got, sent.Load(), err, p.log())
		}
		var pi, w, seq int
		if _, err := fmt.Sscanf(string(m.GetData()), "%d-%d-%d-", &pi, &w, &seq); err != nil {
			t.Fatalf("unexpected body %.40q", m.GetData())
		}
		k := [2]int{pi, w}
		want, ok := next[k]
		if !ok {
			want = w
		}
		if seq != want {
			t.Fatalf("stream %v: got message %d, want %d (out of order or lost)", k, seq, want)
		}
		next[k] = seq + window
		got++
		if err := rcv.AcceptMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	drain := time.Since(start)
	rss2, peak2 := procMemory(t, p.cmd.Process.Pid)
	t.Logf("drained %d in order in %v (%.0f/s); broker RSS %d MiB, peak %d MiB", got, drain.Round(time.Millisecond), float64(got)/drain.Seconds(), rss2>>20, peak2>>20)
	if peak2 > pagingBudget+pagingOverhead {
		t.Fatalf("peak resident memory %d MiB over the budget (%d MiB) plus the fixed overhead (%d MiB)", peak2>>20, pagingBudget>>20, pagingOverhead>>20)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	if m, err := rcv.Receive(ctx, nil); err == nil {
		t.Fatalf("unexpected extra message %.40q", m.GetData())
	}
	cancel()
}
