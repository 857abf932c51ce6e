package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/internal/stompclient"
)

// The admin commands talk to a running broker: queue and conn through
// the REST API of its console listener, send and receive through STOMP.

const adminUsage = `usage:
  junction queue ls [--filter TEXT]            list queues (depth, in flight, consumers, counts)
  junction queue stat NAME                     one queue's statistics
  junction queue create NAME [--type anycast|multicast]
  junction queue delete NAME
  junction queue purge NAME                    remove every message not in flight
  junction queue browse NAME [--offset N] [--limit N]   look at messages without consuming them
  junction queue move FROM TO [--max N]        move messages (e.g. from DLQ back to their queue)
  junction queue scheduled NAME [--cancel ID]  list the messages held back for later and the repeating
                                               ones sent to its address; --cancel removes one by id
  junction conn ls                             list connections
  junction conn close ID
  junction send --to DEST [--body TEXT] [--header K=V]... [--persistent]   (body from stdin without --body)
  junction receive --from DEST [--count N] [--timeout D]
flags for queue and conn: --console URL or HOST:PORT (default 127.0.0.1:8161, $JUNCTION_CONSOLE), --json,
  --user NAME and $JUNCTION_PASSWORD (or --password) when the broker has users
flags for send and receive: --stomp HOST:PORT (default 127.0.0.1:61613, $JUNCTION_STOMP_ADDR),
  --user NAME and $JUNCTION_PASSWORD (or --password) when the broker has users
DEST is a STOMP destination: /queue/NAME or /topic/NAME.
`

// adminFlags are the flags every API command takes.
type adminFlags struct {
	console        string
	json           bool
	user, password string
}

func newAdminFlags(name string, getenv func(string) string, stderr io.Writer) (*flag.FlagSet, *adminFlags) {
	fs := flag.NewFlagSet("junction "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	af := &adminFlags{}
	def := getenv("JUNCTION_CONSOLE")
	if def == "" {
		def = "http://127.0.0.1:8161"
	}
	fs.StringVar(&af.console, "console", def, "the broker's console `URL`")
	fs.BoolVar(&af.json, "json", false, "print JSON instead of a table")
	fs.StringVar(&af.user, "user", getenv("JUNCTION_USER"), "user with the manage permission, when the broker has users ($JUNCTION_USER)")
	af.password = getenv("JUNCTION_PASSWORD")
	fs.StringVar(&af.password, "password", af.password, "that user's password ($JUNCTION_PASSWORD; prefer the variable: flags show in ps)")
	return fs, af
}

// parseInterleaved parses flags that may come before or after the
// positional arguments, as operators type them.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// apiError is an error the API answered with.
type apiError struct {
	status int
	msg    string
	body   []byte // the whole answer, for what else it holds
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.msg, e.status) }

// call sends one API request and decodes the JSON answer into out (if
// not nil).
func (af *adminFlags) call(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	// Longer than the broker's own bound of a membership change (2
	// minutes, management's membershipTimeout), so that the broker's
	// answer, not a bare deadline, tells how an add went.
	timeout := 30 * time.Second
	if strings.HasPrefix(path, "/cluster/members") {
		timeout = 150 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	base := strings.TrimRight(af.console, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base // the listen address, as serve's --console takes it
	}
	req, err := http.NewRequestWithContext(ctx, method, base+"/api/v1"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if af.user != "" {
		req.SetBasicAuth(af.user, af.password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("console %s: %w", af.console, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &apiError{resp.StatusCode, e.Error, data}
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}

// column is one table column: a header and the JSON keys that may hold
// its value.
type column struct {
	header string
	keys   []string
}

func col(header string, keys ...string) column { return column{header, keys} }

// pick returns the first of keys present in m, as text.
func pick(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			switch x := v.(type) {
			case float64:
				return strconv.FormatFloat(x, 'f', -1, 64)
			case string:
				return x
			default:
				b, _ := json.Marshal(x)
				return string(b)
			}
		}
	}
	return ""
}

// items finds the list in an API answer: the answer itself, or its
// first array field ({"queues": [...], "total": N}).
func items(v any) []map[string]any {
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if l, ok := x[k].([]any); ok {
				list = l
				break
			}
		}
	}
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func printTable(w io.Writer, rows []map[string]any, cols []column) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c.header)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		for i, c := range cols {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell(pick(r, c.keys...)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// cell makes a value fit one table cell: control characters (a body
// ending in a newline, a tab) are shown escaped, so that every row stays
// one line and the columns line up.
func cell(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // an XML body prints as <order/>, not \u003corder/\u003e
	return enc.Encode(v)
}

// printKV prints an object as aligned key: value lines, sorted.
func printKV(w io.Writer, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s:\t%s\n", k, pick(m, k))
	}
	tw.Flush()
}

var queueColumns = []column{
	col("NAME", "name"), col("ADDRESS", "address"), col("TYPE", "routingType"),
	col("DEPTH", "depth"), col("IN FLIGHT", "inFlight"), col("CONSUMERS", "consumers"),
	col("ENQUEUED", "enqueued"), col("DEQUEUED", "dequeued"), col("DEAD-LETTERED", "deadLettered"),
	col("DURABLE", "durable"),
}

var connColumns = []column{
	col("ID", "id"), col("PROTOCOL", "protocol"), col("REMOTE", "remoteAddr"), col("USER", "user"),
	col("CLIENT ID", "clientId", "clientID"), col("OPENED", "opened"), col("CONSUMERS", "consumers"),
	col("MSGS IN", "messagesIn"), col("MSGS OUT", "messagesOut"),
}

// isHelp tells whether a command's first argument asks for its usage
// (junction queue -h, as the top-level usage suggests).
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// markBinary prefixes "base64:" to the body of messages the API gives in
// base64 (not UTF-8), which would otherwise read as a text body.
func markBinary(rows []map[string]any) []map[string]any {
	for _, r := range rows {
		if b, ok := r["body"].(string); ok && r["bodyEncoding"] == "base64" {
			r["body"] = "base64:" + b
		}
	}
	return rows
}

// runQueue serves junction queue ...
func runQueue(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", adminUsage)
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, adminUsage)
		return nil
	}
	sub := args[0]
	fs, af := newAdminFlags("queue "+sub, getenv, stderr)
	filter := fs.String("filter", "", "only queues whose name contains `TEXT`")
	rt := fs.String("type", "anycast", "routing type for create: anycast or multicast")
	offset := fs.Int("offset", 0, "browse: first message")
	limit := fs.Int("limit", 20, "browse: messages to show")
	maxN := fs.Int("max", 0, "move: at most this many (0 = all)")
	cancelID := fs.String("cancel", "", "scheduled: cancel the scheduled message or repeating job with this `ID`")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	need := func(n int) error {
		if len(pos) != n {
			return usagef("queue %s: want %d argument(s), got %d\n%s", sub, n, len(pos), adminUsage)
		}
		return nil
	}
	esc := url.PathEscape
	var out any
	switch sub {
	case "ls":
		if err := need(0); err != nil {
			return err
		}
		// The API pages by at most 1,000: gather every page.
		const page = 1000
		var all []map[string]any
		for off := 0; ; off += page {
			q := url.Values{"limit": {strconv.Itoa(page)}, "offset": {strconv.Itoa(off)}}
			if *filter != "" {
				q.Set("filter", *filter)
			}
			var resp any
			if err := af.call(ctx, http.MethodGet, "/queues?"+q.Encode(), nil, &resp); err != nil {
				return err
			}
			rows := items(resp)
			all = append(all, rows...)
			if len(rows) < page {
				break
			}
		}
		if af.json {
			return printJSON(stdout, all)
		}
		printTable(stdout, all, queueColumns)
		return nil
	case "stat":
		if err := need(1); err != nil {
			return err
		}
		if err := af.call(ctx, http.MethodGet, "/queues/"+esc(pos[0]), nil, &out); err != nil {
			return err
		}
	case "create":
		if err := need(1); err != nil {
			return err
		}
		err = af.call(ctx, http.MethodPost, "/queues", map[string]any{"name": pos[0], "routingType": *rt}, &out)
	case "delete":
		if err := need(1); err != nil {
			return err
		}
		// The API answers 204, no body: say what was deleted (--json
		// printed null).
		if err = af.call(ctx, http.MethodDelete, "/queues/"+esc(pos[0]), nil, nil); err == nil {
			out = map[string]any{"deleted": pos[0]}
		}
	case "purge":
		if err := need(1); err != nil {
			return err
		}
		err = af.call(ctx, http.MethodPost, "/queues/"+esc(pos[0])+"/purge", map[string]any{}, &out)
	case "move":
		if err := need(2); err != nil {
			return err
		}
		err = af.call(ctx, http.MethodPost, "/queues/"+esc(pos[0])+"/move", map[string]any{"to": pos[1], "max": *maxN}, &out)
	case "browse":
		if err := need(1); err != nil {
			return err
		}
		q := url.Values{"offset": {strconv.Itoa(*offset)}, "limit": {strconv.Itoa(*limit)}}
		if err := af.call(ctx, http.MethodGet, "/queues/"+esc(pos[0])+"/messages?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		if af.json {
			return printJSON(stdout, out)
		}
		printTable(stdout, markBinary(items(out)), []column{
			col("ID", "id"), col("PRIORITY", "priority"), col("DURABLE", "durable"),
			col("DELIVERIES", "deliveryCount"), col("IN FLIGHT", "inFlight"), col("SIZE", "size", "bodySize"),
			col("BODY", "bodyPreview", "body"),
		})
		return nil
	case "scheduled":
		if err := need(1); err != nil {
			return err
		}
		return queueScheduled(ctx, af, pos[0], *cancelID, *offset, *limit, stdout)
	default:
		return usagef("queue: unknown command %q\n%s", sub, adminUsage)
	}
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, out)
	}
	if m, ok := out.(map[string]any); ok {
		printKV(stdout, m)
	} else {
		fmt.Fprintln(stdout, "ok")
	}
	return nil
}

// runConn serves junction conn ...
func runConn(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", adminUsage)
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, adminUsage)
		return nil
	}
	sub := args[0]
	fs, af := newAdminFlags("conn "+sub, getenv, stderr)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	switch {
	case sub == "ls" && len(pos) == 0:
		var out any
		if err := af.call(ctx, http.MethodGet, "/connections", nil, &out); err != nil {
			return err
		}
		if af.json {
			return printJSON(stdout, out)
		}
		printTable(stdout, items(out), connColumns)
		return nil
	case sub == "close" && len(pos) == 1:
		if err := af.call(ctx, http.MethodDelete, "/connections/"+url.PathEscape(pos[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "closed", pos[0])
		return nil
	}
	return usagef("conn: bad command line\n%s", adminUsage)
}

// headerList collects repeated --header K=V flags.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ",") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// stompCredentials adds --user and --password to send's and receive's flags,
// with the same defaults as the API commands', and returns the dial
// options that log in with them.
func stompCredentials(fs *flag.FlagSet, getenv func(string) string) func() []func(*gostomp.Conn) error {
	user := fs.String("user", getenv("JUNCTION_USER"), "log in as this user, when the broker has users ($JUNCTION_USER)")
	password := fs.String("password", getenv("JUNCTION_PASSWORD"), "that user's password ($JUNCTION_PASSWORD; prefer the variable: flags show in ps)")
	return func() []func(*gostomp.Conn) error {
		opts := []func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet}
		if *user != "" {
			opts = append(opts, gostomp.ConnOpt.Login(*user, *password))
		}
		return opts
	}
}

func stompAddr(getenv func(string) string) string {
	if a := getenv("JUNCTION_STOMP_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:61613"
}

// runSend sends one message over STOMP and waits for its receipt.
func runSend(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("junction send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	to := fs.String("to", "", "destination: /queue/NAME or /topic/NAME")
	body := fs.String("body", "", "message body (default: standard input)")
	addr := fs.String("stomp", stompAddr(getenv), "broker STOMP `HOST:PORT`")
	persistent := fs.Bool("persistent", false, "durable: confirmed once on disk")
	login := stompCredentials(fs, getenv)
	var headers headerList
	fs.Var(&headers, "header", "a header `K=V` (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("send: unexpected argument %q (the body is --body TEXT or standard input)\n%s", fs.Arg(0), adminUsage)
	}
	if *to == "" {
		return usagef("send: --to is required\n%s", adminUsage)
	}
	data := []byte(*body)
	if !isFlagSet(fs, "body") {
		var err error
		if data, err = io.ReadAll(io.LimitReader(stdin, 64<<20)); err != nil {
			return err
		}
	}
	// --header content-type=... is the frame's content type: as a second
	// content-type header after go-stomp's it would be ignored (the
	// first of a repeated header counts).
	contentType := "text/plain"
	sendOpts := []func(*frame.Frame) error{gostomp.SendOpt.Receipt}
	if *persistent {
		sendOpts = append(sendOpts, gostomp.SendOpt.Header("persistent", "true"))
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok {
			return usagef("send: --header %q is not K=V", h)
		}
		if k == frame.ContentType {
			contentType = v
			continue
		}
		sendOpts = append(sendOpts, gostomp.SendOpt.Header(k, v))
	}
	c, err := gostomp.Dial("tcp", *addr, login()...)
	if err != nil {
		return fmt.Errorf("stomp %s: %w", *addr, withErrorBody(err))
	}
	defer func() { disconnect(c, err) }()
	if err := c.Send(*to, contentType, data, sendOpts...); err != nil {
		return withErrorBody(err)
	}
	fmt.Fprintf(stdout, "sent %d bytes to %s\n", len(data), *to)
	return nil
}

// runReceive prints messages from a destination over STOMP.
func runReceive(args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("junction receive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "destination: /queue/NAME or /topic/NAME")
	count := fs.Int("count", 1, "messages to receive (0 = until the timeout)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up waiting after this long without a message")
	addr := fs.String("stomp", stompAddr(getenv), "broker STOMP `HOST:PORT`")
	login := stompCredentials(fs, getenv)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("receive: unexpected argument %q\n%s", fs.Arg(0), adminUsage)
	}
	if *from == "" {
		return usagef("receive: --from is required\n%s", adminUsage)
	}
	c, err := gostomp.Dial("tcp", *addr, login()...)
	if err != nil {
		return fmt.Errorf("stomp %s: %w", *addr, withErrorBody(err))
	}
	defer func() { disconnect(c, err) }()
	sub, err := c.Subscribe(*from, gostomp.AckClientIndividual)
	if err != nil {
		return withErrorBody(err)
	}
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				return withErrorBody(m.Err)
			}
			fmt.Fprintf(stdout, "%s\n", m.Body)
			if err := c.Ack(m); err != nil {
				return err
			}
		case <-time.After(*timeout):
			if *count == 0 {
				return nil
			}
			return fmt.Errorf("receive: %d of %d messages within %v", n, *count, *timeout)
		}
	}
	return nil
}

// withErrorBody adds to a STOMP ERROR its body, where Junction says why
// (message "send failed", body `core: invalid address: "a.*" is a
// wildcard pattern`); go-stomp's error is the message header alone.
func withErrorBody(err error) error {
	var f *frame.Frame
	var e gostomp.Error
	var pe *gostomp.Error
	switch {
	case errors.As(err, &pe) && pe != nil:
		f = pe.Frame
	case errors.As(err, &e):
		f = e.Frame
	}
	if f == nil || f.Command != frame.ERROR {
		return err
	}
	body := strings.TrimSpace(string(f.Body))
	if body == "" || strings.Contains(err.Error(), body) {
		return err
	}
	return fmt.Errorf("%w: %s", err, body)
}

// disconnect ends the STOMP connection: gracefully after success; at
// once after an error, for the broker closes a connection it sent an
// ERROR on, and go-stomp's Disconnect could then wait 30 s for a
// RECEIPT that never comes.
func disconnect(c *gostomp.Conn, err error) {
	if err != nil {
		c.MustDisconnect()
		return
	}
	c.Disconnect()
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
