package stomp

import (
	"fmt"
	"io"
	"time"

	"github.com/junctionmq/junction/core"
)

// streamBody writes the body of a streamed message (core.Message.Streamed)
// after its MESSAGE frame's headers, which *buf holds: the headers
// first, then the body from its file through a buffer of
// core.StreamBuffer bytes, each write bounded by WriteTimeout; the NUL
// that ends the frame is left in *buf for the writer's next write. On
// failure it stops the writer (the frame is cut off: the client sees the
// connection close) and reports false.
func (c *conn) streamBody(buf *[]byte, m *core.Message) bool {
	if !c.write(buf) {
		return false
	}
	r, err := m.OpenBody()
	if err != nil {
		c.stopWriter(err)
		return false
	}
	defer r.Close()
	bp := core.GetStreamBuffer()
	defer core.PutStreamBuffer(bp)
	var sent int64
	for {
		n, rerr := io.ReadFull(r, *bp)
		if n > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
			if _, err := c.nc.Write((*bp)[:n]); err != nil {
				c.stopWriter(err)
				return false
			}
			sent += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			c.stopWriter(rerr)
			return false
		}
	}
	if sent != m.Size() {
		c.stopWriter(fmt.Errorf("stomp: large message %d: %d body bytes of %d", m.ID, sent, m.Size()))
		return false
	}
	*buf = append(*buf, 0)
	return true
}
