package scenario

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// disconnectReceipt is the receipt id of the raw producers' DISCONNECT; the
// SEND receipts are decimal sequence numbers, so they never collide.
const disconnectReceipt = "bye"

// rawProducer sends persistent messages with up to window RECEIPTs
// outstanding on one raw connection: writeLoop writes SEND frames and
// readLoop reads RECEIPTs, so the two never wait for each other.
type rawProducer struct {
	b      *bench
	rc     *rawConn
	window int
	slots  chan struct{} // one token per outstanding receipt; capacity window

	mu      sync.Mutex
	pending map[uint64]time.Duration // receipt seq -> send stamp; guarded by mu

	hist lockedHist // send-to-RECEIPT latency

	readDone chan struct{} // closed when readLoop returns
	bye      chan struct{} // closed when the DISCONNECT receipt arrives
}

// newRawProducer starts the RECEIPT reader of rc.
func newRawProducer(b *bench, rc *rawConn, window int) *rawProducer {
	p := &rawProducer{
		b:        b,
		rc:       rc,
		window:   window,
		slots:    make(chan struct{}, window),
		pending:  make(map[uint64]time.Duration, window),
		readDone: make(chan struct{}),
		bye:      make(chan struct{}),
	}
	go p.readLoop()
	return p
}

// writeLoop sends until b.stop, never with more than window receipts
// outstanding. It flushes only when it would otherwise wait for a receipt,
// so frames written back to back share a syscall. Only writeLoop writes to
// the connection until it returns.
func (p *rawProducer) writeLoop() error {
	b := p.b
	body := make([]byte, b.cfg.size)
	hdr := []string{"destination", b.dest, "persistent", "true", "receipt", ""}
	var num [20]byte
	for seq := uint64(1); !b.stopped.Load(); seq++ {
		select {
		case p.slots <- struct{}{}:
		default:
			if err := p.rc.bw.Flush(); err != nil {
				return err
			}
			select {
			case p.slots <- struct{}{}:
			case <-b.stop:
				return nil
			case <-p.readDone:
				return nil // readLoop has reported why
			}
		}
		stamp := time.Since(b.base)
		putStamp(body, stamp)
		p.mu.Lock()
		p.pending[seq] = stamp
		p.mu.Unlock()
		hdr[5] = string(strconv.AppendUint(num[:0], seq, 10))
		if err := writeFrame(p.rc.bw, "SEND", hdr, body); err != nil {
			return err
		}
		b.sent.Add(1)
	}
	return p.rc.bw.Flush()
}

// readLoop reads RECEIPTs until the connection ends, the DISCONNECT receipt
// arrives, or the broker sends an ERROR (which fails the run).
func (p *rawProducer) readLoop() {
	defer close(p.readDone)
	b := p.b
	for {
		f, err := readFrame(p.rc.br)
		if err != nil {
			b.fail(fmt.Errorf("producer read: %w", err))
			return
		}
		switch f.command {
		case "RECEIPT":
			id, _ := f.get("receipt-id")
			if id == disconnectReceipt {
				close(p.bye)
				return
			}
			seq, err := strconv.ParseUint(id, 10, 64)
			p.mu.Lock()
			stamp, ok := p.pending[seq]
			delete(p.pending, seq)
			p.mu.Unlock()
			if err != nil || !ok {
				b.fail(fmt.Errorf("producer: RECEIPT with unknown receipt-id %q", id))
				return
			}
			b.confirmed.Add(1)
			if b.measuring.Load() {
				p.hist.record(time.Since(b.base) - stamp)
			}
			<-p.slots
		case "ERROR":
			b.fail(fmt.Errorf("producer: %w", brokerError(f)))
			return
		default:
			// MESSAGE and others are not expected on a producer; ignore.
		}
	}
}

// outstanding returns the number of SENDs whose RECEIPT has not arrived.
func (p *rawProducer) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// close sends DISCONNECT with a receipt once writeLoop has returned, waits
// for the receipt for at most closeTimeout, and closes the socket.
func (p *rawProducer) close() {
	select {
	case <-p.readDone:
	default:
		p.rc.nc.SetWriteDeadline(time.Now().Add(closeTimeout))
		if writeFrame(p.rc.bw, "DISCONNECT", []string{"receipt", disconnectReceipt}, nil) == nil &&
			p.rc.bw.Flush() == nil {
			select {
			case <-p.bye:
			case <-p.readDone:
			case <-time.After(closeTimeout):
			}
		}
	}
	p.rc.nc.Close()
}
