package scenario

// A minimal STOMP 1.2 client-side frame writer and reader, used where
// go-stomp's Conn cannot pipeline (its Send with a receipt holds the
// connection lock until the RECEIPT arrives; STYLE.md §6.x). It supports what
// the producers need: CONNECT/CONNECTED, SEND with receipt, RECEIPT, ERROR,
// DISCONNECT, and heart-beat EOLs between frames. Reads are bounded.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Bounds on frames read from the broker.
const (
	rawMaxLine    = 64 << 10 // command or header line (the bufio.Reader size)
	rawMaxHeaders = 256
	rawMaxBody    = 16 << 20
)

// rawFrame is one decoded STOMP frame.
type rawFrame struct {
	command string
	header  []string // name, value, name, value, ...
	body    []byte
}

// get returns the first value of header name: STOMP 1.2 "Repeated Header
// Entries", only the first occurrence counts.
func (f *rawFrame) get(name string) (string, bool) {
	for i := 0; i+1 < len(f.header); i += 2 {
		if f.header[i] == name {
			return f.header[i+1], true
		}
	}
	return "", false
}

// brokerError turns an ERROR frame into an error with its message header and
// the start of its body.
func brokerError(f *rawFrame) error {
	msg, _ := f.get("message")
	body := strings.TrimSpace(string(f.body))
	if len(body) > 200 {
		body = body[:200] + "..."
	}
	if body != "" {
		return fmt.Errorf("broker ERROR: %s: %s", msg, body)
	}
	return fmt.Errorf("broker ERROR: %s", msg)
}

// headerEscaper applies STOMP 1.2 "Value Encoding" to header names and
// values of every frame but CONNECT and CONNECTED.
var headerEscaper = strings.NewReplacer(`\`, `\\`, "\r", `\r`, "\n", `\n`, ":", `\c`)

// writeFrame writes one frame to w (without flushing). hdr holds name, value
// pairs. A body is always preceded by content-length, so it may hold NULs.
func writeFrame(w *bufio.Writer, command string, hdr []string, body []byte) error {
	escape := command != "CONNECT" && command != "STOMP"
	w.WriteString(command)
	w.WriteByte('\n')
	for i := 0; i+1 < len(hdr); i += 2 {
		if escape {
			headerEscaper.WriteString(w, hdr[i])
			w.WriteByte(':')
			headerEscaper.WriteString(w, hdr[i+1])
		} else {
			w.WriteString(hdr[i])
			w.WriteByte(':')
			w.WriteString(hdr[i+1])
		}
		w.WriteByte('\n')
	}
	if body != nil {
		w.WriteString("content-length:")
		var num [20]byte
		w.Write(strconv.AppendInt(num[:0], int64(len(body)), 10))
		w.WriteByte('\n')
	}
	w.WriteByte('\n')
	w.Write(body)
	return w.WriteByte(0) // bufio.Writer errors are sticky: this reports any above
}

// readLine returns one line without its EOL (LF or CRLF). The slice is valid
// until the next read.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("stomp: line longer than 64 KiB")
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// unescapeValue undoes STOMP 1.2 value encoding; an undefined escape is an
// error, as the spec requires.
func unescapeValue(s []byte) (string, error) {
	if !strings.Contains(string(s), `\`) {
		return string(s), nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			return "", errors.New("stomp: header ends with a backslash")
		}
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'c':
			b.WriteByte(':')
		default:
			return "", fmt.Errorf("stomp: undefined escape \\%c in header", s[i])
		}
	}
	return b.String(), nil
}

// readFrame reads one frame, skipping heart-beat EOLs before it. r must have
// a buffer of at least rawMaxLine bytes, which bounds every line.
func readFrame(r *bufio.Reader) (*rawFrame, error) {
	f := &rawFrame{}
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if len(line) > 0 {
			f.command = string(line)
			break
		}
	}
	escaped := f.command != "CONNECTED"
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, noEOF(err)
		}
		if len(line) == 0 {
			break
		}
		if len(f.header) >= 2*rawMaxHeaders {
			return nil, fmt.Errorf("stomp: more than %d headers", rawMaxHeaders)
		}
		i := strings.IndexByte(string(line), ':')
		if i < 0 {
			return nil, fmt.Errorf("stomp: header line without colon: %q", line)
		}
		name, value := string(line[:i]), string(line[i+1:])
		if escaped {
			var err1, err2 error
			name, err1 = unescapeValue(line[:i])
			value, err2 = unescapeValue(line[i+1:])
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
		}
		f.header = append(f.header, name, value)
	}
	if cl, ok := f.get("content-length"); ok {
		n, err := strconv.Atoi(cl)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("stomp: bad content-length %q", cl)
		}
		if n > rawMaxBody {
			return nil, fmt.Errorf("stomp: content-length %d over %d", n, rawMaxBody)
		}
		f.body = make([]byte, n)
		if _, err := io.ReadFull(r, f.body); err != nil {
			return nil, noEOF(err)
		}
		nul, err := r.ReadByte()
		if err != nil {
			return nil, noEOF(err)
		}
		if nul != 0 {
			return nil, errors.New("stomp: body not terminated by NUL after content-length bytes")
		}
		return f, nil
	}
	for {
		chunk, err := r.ReadSlice(0)
		if len(f.body)+len(chunk) > rawMaxBody+1 {
			return nil, fmt.Errorf("stomp: body over %d bytes", rawMaxBody)
		}
		f.body = append(f.body, chunk...)
		if err == nil {
			f.body = f.body[:len(f.body)-1] // the NUL
			return f, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, noEOF(err)
		}
	}
}

// noEOF turns EOF inside a frame into ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// rawConn is a STOMP connection driven by raw frames.
type rawConn struct {
	nc net.Conn
	bw *bufio.Writer
	br *bufio.Reader
}

// dialRaw connects to cfg.dialAddr and completes the STOMP CONNECT exchange
// with heart-beats off. The caller owns the connection and sets deadlines.
func dialRaw(ctx context.Context, cfg *config) (*rawConn, error) {
	d := net.Dialer{Timeout: cfg.dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", cfg.dialAddr)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{
		nc: nc,
		bw: bufio.NewWriterSize(nc, 64<<10),
		br: bufio.NewReaderSize(nc, rawMaxLine),
	}
	hdr := []string{"accept-version", cfg.version, "host", cfg.host, "heart-beat", "0,0"}
	if cfg.login != "" || cfg.passcode != "" {
		hdr = append(hdr, "login", cfg.login, "passcode", cfg.passcode)
	}
	nc.SetDeadline(time.Now().Add(cfg.dialTimeout))
	if err := writeFrame(rc.bw, "CONNECT", hdr, nil); err != nil {
		nc.Close()
		return nil, err
	}
	if err := rc.bw.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	f, err := readFrame(rc.br)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("stomp CONNECT: %w", err)
	}
	switch f.command {
	case "CONNECTED":
	case "ERROR":
		nc.Close()
		return nil, fmt.Errorf("stomp CONNECT: %w", brokerError(f))
	default:
		nc.Close()
		return nil, fmt.Errorf("stomp CONNECT: unexpected %s frame", f.command)
	}
	nc.SetDeadline(time.Time{})
	return rc, nil
}
