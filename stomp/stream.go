package stomp

import (
	"fmt"
	"io"
	"time"

	"github.com/junctionmq/junction/core"
)

// streamBody writes buf (a MESSAGE frame's headers, and what came
// before them) and then the body of the streamed message m
// (core.Message.Streamed) from its file through a buffer of
// core.StreamBuffer bytes, each write bounded by WriteTimeout, all but a
// small last piece, which is left in the returned buffer with the NUL
// that ends the frame for the writer's next write (so that Written
// follows it). On failure it closes the connection (the frame is cut
// off: the client sees it close; the writer's next write fails and
// stops it) and reports false.
func (c *conn) streamBody(buf []byte, m *core.Message) ([]byte, bool) {
	fail := func(err error) ([]byte, bool) {
		c.debug().Err(err).Uint64("message", m.ID).Msg("stomp: streaming a large body failed")
		c.nc.Close()
		return buf[:0], false
	}
	c.BeforeWrite()
	if err := c.writeAll(buf); err != nil {
		return fail(err)
	}
	buf = buf[:0]
	r, err := m.OpenBody()
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	bp := core.GetStreamBuffer()
	defer core.PutStreamBuffer(bp)
	left := m.Size()
	for left > 0 {
		n, err := io.ReadFull(r, (*bp)[:min(int64(len(*bp)), left)])
		left -= int64(n)
		if err != nil {
			return fail(fmt.Errorf("stomp: large message %d: body ends %d bytes short: %w", m.ID, left, err))
		}
		k := n
		if left == 0 {
			k = n - min(n, 4<<10) // a small last piece stays for the writer
		}
		if err := c.writeAll((*bp)[:k]); err != nil {
			return fail(err)
		}
		if left == 0 {
			buf = append(buf, (*bp)[k:n]...)
		}
	}
	return append(buf, 0), true
}

// writeAll writes b to the connection within the write timeout.
func (c *conn) writeAll(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(b)
	return err
}
