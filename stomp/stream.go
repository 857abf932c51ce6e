package stomp

import (
	"time"

	"github.com/junctionmq/junction/core"
)

// streamBody writes buf (a MESSAGE frame's headers, and what came
// before them) and then the body of the streamed message m
// (core.Message.Streamed) from its file (core.Message.WriteBody), each
// write bounded by WriteTimeout, all but a small last piece, which is
// left in the returned buffer with the NUL that ends the frame for the
// writer's next write (so that Written follows it). On failure it closes
// the connection (the frame is cut off: the client sees it close; the
// writer's next write fails and stops it) and reports false.
func (c *conn) streamBody(buf []byte, m *core.Message) ([]byte, bool) {
	c.BeforeWrite()
	buf, err := m.WriteBody(buf, c.writeAll)
	if err != nil {
		c.debug().Err(err).Uint64("message", m.ID).Msg("stomp: streaming a large body failed")
		c.nc.Close()
		return buf[:0], false
	}
	return append(buf, 0), true
}

// writeAll writes b to the connection within the write timeout.
func (c *conn) writeAll(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(b)
	return err
}
