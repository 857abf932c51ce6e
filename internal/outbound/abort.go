package outbound

import "net"

// Abort closes conn abortively: what the peer has not received yet is
// dropped instead of delivered. On the TCP connection underneath (found
// through the wrappers that have a NetConn method, as *tls.Conn and the
// wrappers of transports and websocket do) it sets SO_LINGER to 0 and
// closes it: the kernel discards its send queue, retransmits nothing
// more, and answers the peer with a reset. The wrappers themselves are
// not closed (TLS's Close would first write a close_notify, which can
// block behind a full send queue); their reads and writes fail, and the
// front-end tears the connection down as for a lost client. A conn with
// no TCP connection underneath is just closed.
//
// The cluster's fence uses it (core.SessionOptions.Abort): the bytes of
// a delivery written to a client that cannot be reached any more must
// never arrive after the delivery was made again elsewhere.
func Abort(conn net.Conn) error {
	inner := conn
	for {
		if l, ok := inner.(interface{ SetLinger(sec int) error }); ok {
			err := l.SetLinger(0)
			if cerr := inner.Close(); err == nil {
				err = cerr
			}
			return err
		}
		w, ok := inner.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		next := w.NetConn()
		if next == nil {
			break
		}
		inner = next
	}
	return conn.Close()
}
