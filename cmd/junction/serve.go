package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/cluster"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/persistence/large"
	"github.com/junctionmq/junction/persistence/page"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/transports"
	"github.com/junctionmq/junction/websocket"
)

// instance is a running broker with its listeners.
type instance struct {
	log     zerolog.Logger
	broker  *core.Broker
	servers []*transports.Server
	// The journals, nil with persistence off; closed after the broker.
	msgs, bindings *journal.Journal
	// protocols are closed first at shutdown, so each says goodbye its
	// own way (MQTT 5: DISCONNECT "server shutting down").
	protocols []io.Closer
	// ws serves STOMP, MQTT and AMQP over WebSockets; its sessions are
	// hijacked from HTTP and shut down by it.
	ws *websocket.Handler
	// httpServers serve the console; shut down with the listeners.
	httpServers []*http.Server
	// ready is set once recovery is done and every listener is up
	// (/readyz).
	ready atomic.Bool
	// certs reloads the TLS certificate on SIGHUP; nil without TLS.
	certs *transports.CertReloader
	// lmu guards addrs and servers, which listeners add to while the
	// console (started first) may already read them.
	lmu   sync.Mutex
	addrs map[string]net.Addr
	wg    sync.WaitGroup
	errc  chan error
	// sec authenticates and authorizes clients and watches the users
	// file; stopped after the broker.
	sec *brokerSecurity

	// limits are applied by every listener's accept loop.
	limits LimitsConfig

	// cluster is this broker's cluster node (nil for a single broker):
	// the broker is then its access broker; closed after the broker.
	cluster *cluster.Node
	// node is the broker's part in a shared-store group; nil without
	// --ha.
	node *haNode
	// console serves the console listener when a backup opened it before
	// the broker existed; the management handler replaces the backup's
	// at the takeover. nil otherwise.
	console *swapHandler
	// fence stops the page stores' and large messages' writes when the
	// store is lost; nil without --ha.
	fence *storeFence
	// hosts are the HTTP listeners' Host allow-lists, made by
	// startListeners or, first, by a backup's console.
	hosts *hostGuard
	// openTime is how long open took: the journals read, the page stores
	// and large messages opened, the broker's state replayed.
	openTime time.Duration
	// live is the configuration in force and what reloads it
	// (reload.go); nil for an instance made by start.
	live *liveConfig
}

func newInstance(log zerolog.Logger) *instance {
	return &instance{log: log, addrs: make(map[string]net.Addr), errc: make(chan error, 8)}
}

// colourTerminal tells whether the console log format may colour its
// lines: only on a terminal, so that a log redirected to a file, a pipe
// or journald carries no escape sequences (NO_COLOR turns colour off).
func colourTerminal(w io.Writer) bool {
	return isTerminal(w) && os.Getenv("NO_COLOR") == ""
}

func newLogger(cfg Config, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(cfg.LogLevel)
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !colourTerminal(w)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isReady answers /readyz: recovery done and every listener up, and for
// a cluster node, not out of the cluster (its parameters, the number of
// groups, differ from those of most members: it serves no client).
func (in *instance) isReady() bool {
	// ready first: in.cluster is set before it.
	return in.ready.Load() && (in.cluster == nil || in.cluster.OutOfCluster() == "")
}

// probesOnly serves /healthz and /readyz from the console's handler h
// and nothing else: the plain HTTP requests of the WebSocket ports and
// the one port when the console is disabled, so that their health checks
// still answer.
func probesOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz":
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, "the console is disabled (--console is empty)", http.StatusNotFound)
	})
}

// The journal satisfies core's ports structurally; this is where that is
// checked.
var (
	_ core.MessageJournal = (*journal.Journal)(nil)
	_ core.Journal        = (*journal.Journal)(nil)
	_ core.LargeStore     = (*large.Store)(nil)
)

// openJournals opens the message and bindings journals under the data
// directory.
func openJournals(cfg Config, log zerolog.Logger) (msgs, bindings *journal.Journal, err error) {
	p := cfg.Persistence
	mode := journal.Strict
	if p.Recovery == "salvage" {
		mode = journal.Salvage
	}
	events := func(name string) journal.EventListener {
		l := log.With().Str("journal", name).Logger()
		return journal.EventListener{
			OnTornTail: func(file string, offset, n int64) {
				l.Warn().Str("file", file).Int64("offset", offset).Int64("bytes", n).
					Msg("recovered: cut off a torn, never-confirmed tail")
			},
			OnRoll: func(sealed, next string) {
				l.Debug().Str("sealed", sealed).Str("next", next).Msg("journal file rolled")
			},
			OnReclaim: func(file string) {
				l.Debug().Str("file", file).Msg("dead journal file returned to the pool")
			},
			OnCompact: func(files, copied int, d time.Duration) {
				l.Info().Int("files", files).Int("records_copied", copied).Dur("took", d).Msg("journal compacted")
			},
		}
	}
	msgs, err = journal.Open(journal.Config{
		Dir: filepath.Join(cfg.DataDir, "journal"), FileSize: int64(p.FileSize),
		MinFiles: p.MinFiles, PoolFiles: p.PoolFiles,
		CompactMinRatio: p.CompactMinRatio, CompactMinFiles: p.CompactMinFiles,
		Recovery: mode, Events: events("messages"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("message journal: %w", err)
	}
	bindings, err = journal.Open(journal.Config{
		Dir: filepath.Join(cfg.DataDir, "bindings"), FileSize: bindingsFileSize,
		MinFiles: 1, PoolFiles: 2, Recovery: mode, Events: events("bindings"),
	})
	if err != nil {
		msgs.Close()
		return nil, nil, fmt.Errorf("bindings journal: %w", err)
	}
	return msgs, bindings, nil
}

// start opens the data directory, creates the broker and starts every
// configured listener.
func start(cfg Config, logw io.Writer) (*instance, error) {
	in := newInstance(newLogger(cfg, logw))
	if err := in.open(cfg); err != nil {
		return nil, err
	}
	if err := in.startListeners(cfg); err != nil {
		in.stop(context.Background())
		return nil, err
	}
	return in, nil
}

// open opens the data directory (recovering the journals, the page
// stores and the large messages) and creates the broker.
func (in *instance) open(cfg Config) error {
	log := in.log
	began := time.Now()
	defer func() { in.openTime = time.Since(began) }()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	bcfg := core.Config{AddressSettings: cfg.AddressSettings, Logger: log.With().Str("component", "core").Logger()}
	if in.sec == nil {
		sec, err := newBrokerSecurity(cfg, log)
		if err != nil {
			return err
		}
		in.sec = sec
	}
	in.sec.configure(&bcfg)
	var msgs, bindings *journal.Journal
	if cfg.Cluster.enabled() {
		return in.openCluster(cfg, bcfg)
	}
	if cfg.Persistence.Enabled {
		var err error
		if msgs, bindings, err = openJournals(cfg, log); err != nil {
			if errors.Is(err, journal.ErrLocked) && in.node == nil {
				return fmt.Errorf("data directory %s is in use by another broker (%w); stop that one first, or start this one with --ha shared-store to wait as its backup", cfg.DataDir, err)
			}
			return err
		}
		bcfg.Messages, bcfg.Bindings = msgs, bindings
		ls, err := large.Open(filepath.Join(cfg.DataDir, "large"), fs.OS())
		if err != nil {
			msgs.Close()
			bindings.Close()
			return fmt.Errorf("large-message store: %w", err)
		}
		bcfg.Large, bcfg.LargeMessageThreshold = ls, int(cfg.Persistence.LargeMessageThreshold)
		pages, err := page.Open(filepath.Join(cfg.DataDir, "pages"), fs.OS(), page.Options{SegmentSize: int64(cfg.Persistence.PageSegmentSize)})
		if err != nil {
			msgs.Close()
			bindings.Close()
			return fmt.Errorf("page store: %w", err)
		}
		bcfg.Pager = pagerAdapter{pages}
		if in.fence != nil {
			bcfg.Large = fencedLarge{bcfg.Large, in.fence}
			bcfg.Pager = fencedPager{bcfg.Pager, in.fence}
		}
		bcfg.Disk = diskLimits(cfg, msgs, bindings, pages)
	}
	bcfg.MaxMemory = memoryBudget(cfg.MaxMemory)
	goLimit := softMemoryLimit(bcfg.MaxMemory)
	log.Info().Int64("max_memory", bcfg.MaxMemory).Int64("go_memory_limit", goLimit).
		Msg("memory budget for messages: past it each address applies its address-full-policy (default PAGE)")
	bcfg.MaxAutoCreatedQueuesPerUser = cfg.Limits.MaxAutoCreatedQueues
	bcfg.PreAuthBudget = int64(cfg.Limits.PreAuthBudget)
	bcfg.Events = cfg.Notifications
	bcfg.Diverts, bcfg.VirtualTopics = cfg.Diverts, cfg.VirtualTopics
	b, err := core.New(bcfg)
	if err != nil {
		if msgs != nil {
			msgs.Close()
			bindings.Close()
		}
		return err
	}
	in.broker, in.msgs, in.bindings = b, msgs, bindings
	in.sec.start(b)
	return nil
}

// startListeners creates the protocol servers and serves them on their
// own ports, over WebSockets, on the one port that detects every
// protocol, and on the TLS ports.
func (in *instance) startListeners(cfg Config) error {
	log, b := in.log, in.broker
	in.limits = cfg.Limits
	ms, err := mqtt.New(mqtt.Config{
		ConnectTimeout:       cfg.Limits.HandshakeTimeout,
		PreAuthMaxPacketSize: int(cfg.Limits.PreAuthMaxFrameSize),
		FrameTimeout:         cfg.Limits.frameTimeout(),
		FrameMinRate:         int64(cfg.Limits.FrameMinRate),
		MaxSubscriptions:     unlimitedIfZero(cfg.Limits.MaxSubscriptions),
		MaxPacketSize:        int(cfg.MQTT.MaxPacketSize),
		MaxMessageSize:       int(cfg.MQTT.MaxMessageSize),
		MaxSessionExpiry:     cfg.MQTT.SessionExpiry,
		ReceiveMaximum:       cfg.MQTT.ReceiveMaximum,
		MaxSessionBytes:      int64(cfg.MQTT.MaxSessionBytes),
		Version:              version,
		Logger:               log.With().Str("component", "mqtt").Logger(),
	}, b)
	if err != nil {
		return fmt.Errorf("mqtt: %w", err)
	}
	in.protocols = append(in.protocols, ms)
	hb := cfg.Stomp.HeartBeatMin
	if hb == 0 {
		hb = -1
	}
	ss := stomp.New(stomp.Config{
		ConnectTimeout:      cfg.Limits.HandshakeTimeout,
		PreAuthMaxFrameSize: int(cfg.Limits.PreAuthMaxFrameSize),
		FrameTimeout:        cfg.Limits.frameTimeout(),
		FrameMinRate:        int64(cfg.Limits.FrameMinRate),
		MaxSubscriptions:    unlimitedIfZero(cfg.Limits.MaxSubscriptions),
		MaxFrameSize:        int(cfg.Stomp.MaxFrameSize),
		MaxMessageSize:      int(cfg.Stomp.MaxMessageSize),
		MaxHeaders:          cfg.Stomp.MaxHeaders,
		MaxHeaderLength:     int(cfg.Stomp.MaxHeaderLength),
		HeartBeatSend:       hb,
		HeartBeatReceive:    hb,
		DefaultPrefetch:     cfg.Stomp.Prefetch,
		ServerName:          "Junction/" + version,
		Logger:              log.With().Str("component", "stomp").Logger(),
	}, b)
	idle := cfg.AMQP.IdleTimeout
	if idle == 0 {
		idle = -1
	}
	as := amqp.New(amqp.Config{
		MaxFrameSize:        uint32(cfg.AMQP.MaxFrameSize),
		MaxMessageSize:      int(cfg.AMQP.MaxMessageSize),
		MaxLargeMessageSize: int(cfg.AMQP.MaxLargeMessageSize),
		IdleTimeout:         idle,
		LinkCredit:          uint32(cfg.AMQP.LinkCredit),
		RequireSASL:         cfg.AMQP.RequireSASL,
		Version:             version,
		Logger:              log.With().Str("component", "amqp").Logger(),

		HandshakeTimeout: cfg.Limits.HandshakeTimeout,
		FrameTimeout:     cfg.Limits.frameTimeout(),
		FrameMinRate:     int64(cfg.Limits.FrameMinRate),
		MaxLinks:         unlimitedIfZero(cfg.Limits.MaxSubscriptions),
	}, b)
	// With users, the console and its API need a user who may manage.
	requireLogin := in.sec != nil && in.sec.store.HasUsers()
	anonymous, _, _ := cfg.anonymousPolicy() // validated: no error
	hosts := in.hosts                        // a backup's console made it already
	if hosts == nil {
		if hosts, err = newHostGuard(cfg, log.With().Str("component", "http").Logger(), requireLogin, anonymous); err != nil {
			return fmt.Errorf("allowed hosts: %w", err)
		}
		in.hosts = hosts
	}
	mcfg := management.Config{
		Version:      version,
		Listeners:    in.listenerAddrs,
		Rejections:   in.rejections,
		Journal:      journalStats(in.msgs),
		Ready:        in.isReady,
		Logger:       log.With().Str("component", "management").Logger(),
		RequireLogin: requireLogin,
		// The console's list, wherever it is served: on its own port and
		// as the fallback of the WebSocket ports.
		AllowHost:         hosts.console.Allows,
		OnHostRefused:     hosts.refused,
		RequestRejections: hosts.rejections,
		Cluster:           in.clusterAdmin(),
	}
	if in.live != nil {
		mcfg.Settings, mcfg.Reload = in.live.view, in.live.apiReload
	}
	if in.node != nil {
		mcfg.HA = in.node.status
	}
	mgmt := management.New(mcfg, b)
	var fallback http.Handler = mgmt
	if cfg.Console.Listen == "" {
		// --console '' disables the console: its pages, API and metrics
		// are not served on the WebSocket ports either.
		fallback = probesOnly(mgmt)
	}
	wsh, err := websocket.New(websocket.Config{
		// The console answers the plain HTTP requests of a shared port.
		Fallback: fallback,
		Handlers: map[string]func(context.Context, net.Conn){
			"stomp": ss.ServeConn, "mqtt": ms.ServeConn, "amqp": as.ServeConn,
		},
		AllowHost:      hosts.ws.Allows,
		OnHostRefused:  hosts.refused,
		AllowedOrigins: commaList(cfg.WebSocket.AllowedOrigins),
		MaxMessageSize: int64(cfg.WebSocket.MaxMessageSize),
		Logger:         log.With().Str("component", "websocket").Logger(),
	})
	if err != nil {
		return fmt.Errorf("websocket: %w", err)
	}
	in.ws = wsh

	unknown := func(conn net.Conn, prefix []byte, err error) {
		if len(prefix) == 0 {
			return // a health check that connected and left
		}
		log.Info().Str("remote", conn.RemoteAddr().String()).Hex("first_bytes", prefix).AnErr("reason", err).
			Msg("closed a connection speaking no known protocol")
	}
	mux := &transports.Mux{
		Protocols: []transports.Protocol{
			{Name: "http", Detect: transports.DetectHTTP, Handler: withListener("all", wsh.ServeConn)},
			{Name: "amqp", Detect: amqp.Detect, Handler: as.ServeConn, Reject: as.Reject},
			{Name: "mqtt", Detect: mqtt.Detect, Handler: ms.ServeConn},
			{Name: "stomp", Detect: stomp.Detect, Handler: ss.ServeConn, Reject: ss.Reject},
		},
		DetectTimeout: cfg.All.DetectTimeout,
		OnUnknown:     unknown,
	}
	type listener struct {
		name, addr string
		h          transports.Handler
		reject     func(net.Conn)
	}
	ls := []listener{
		{"mqtt", cfg.MQTT.Listen, ms.ServeConn, nil},
		{"amqp", cfg.AMQP.Listen, as.ServeConn, as.Reject},
		{"stomp", cfg.Stomp.Listen, ss.ServeConn, ss.Reject},
		{"websocket", cfg.WebSocket.Listen, withListener("websocket", wsh.ServeConn), nil},
	}
	all := mux
	if cfg.TLS.enabled() {
		tlsCfg, certs, err := transports.TLSConfig(transports.TLSOptions{
			CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key,
			ClientCAFile: cfg.TLS.ClientCA, RequireClientCert: cfg.TLS.RequireClientCert,
		})
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		in.certs = certs
		wrap := func(h transports.Handler, reject func(net.Conn)) *transports.TLSHandler {
			return &transports.TLSHandler{
				Config: tlsCfg, Handler: h, OnLimit: reject, HandshakeTimeout: cfg.TLS.HandshakeTimeout,
				OnHandshakeError: func(conn net.Conn, err error) {
					log.Debug().Str("remote", conn.RemoteAddr().String()).Err(err).Msg("TLS handshake failed")
				},
			}
		}
		for _, l := range []listener{
			{"mqtt+tls", cfg.TLS.MQTT, ms.ServeConn, nil},
			{"amqp+tls", cfg.TLS.AMQP, as.ServeConn, as.Reject},
			{"stomp+tls", cfg.TLS.Stomp, ss.ServeConn, ss.Reject},
			{"websocket+tls", cfg.TLS.WebSocket, withListener("websocket+tls", wsh.ServeConn), nil},
		} {
			th := wrap(l.h, l.reject)
			ls = append(ls, listener{l.name, l.addr, th.ServeConn, th.Reject})
		}
		// The one port takes TLS too: a ClientHello, then detection on
		// the decrypted stream.
		th := wrap(mux.ServeConn, mux.Reject)
		all = &transports.Mux{
			Protocols:     append([]transports.Protocol{{Name: "tls", Detect: transports.DetectTLS, Handler: th.ServeConn, Reject: th.Reject}}, mux.Protocols...),
			DetectTimeout: cfg.All.DetectTimeout,
			OnUnknown:     unknown,
		}
	}
	ls = append(ls, listener{"all", cfg.All.Listen, all.ServeConn, all.Reject})
	if in.console != nil {
		in.console.set(mgmt) // the backup's console listener, kept
	} else if cfg.Console.Listen != "" {
		if err := in.serveHTTP("console", cfg.Console.Listen, mgmt); err != nil {
			return err
		}
	}
	for _, l := range ls {
		if l.addr == "" {
			continue
		}
		if err := in.listen(l.name, l.addr, cfg.MaxConnections, l.h, l.reject); err != nil {
			return err
		}
	}
	return nil
}

func (in *instance) listen(name, addr string, maxConns int, h transports.Handler, onLimit func(net.Conn)) error {
	l, err := transports.Listen(addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	log := in.log.With().Str("listener", name).Logger()
	rejects := &rejectLog{log: log, every: 10 * time.Second}
	srv := &transports.Server{
		Name: name, Handler: h, MaxConns: maxConns, OnLimit: onLimit,
		MaxConnsPerIP:  in.limits.MaxConnectionsPerIP,
		ConnRatePerIP:  in.limits.ConnectionRatePerIP,
		ConnBurstPerIP: in.limits.ConnectionBurstPerIP,
		Events: transports.Events{
			OnAcceptError: func(err error, d time.Duration) {
				log.Warn().Err(err).Dur("retry_in", d).Msg("accept failed")
			},
			OnReject: rejects.reject,
		},
	}
	in.lmu.Lock()
	in.servers = append(in.servers, srv)
	in.addrs[name] = l.Addr()
	in.lmu.Unlock()
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, transports.ErrServerClosed) {
			in.errc <- fmt.Errorf("%s listener: %w", name, err)
		}
	}()
	return nil
}

// serveHTTP serves h on its own listener with HTTP timeouts.
func (in *instance) serveHTTP(name, addr string, h http.Handler) error {
	l, err := transports.Listen(addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	hs := &http.Server{
		Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: stdlog.New(io.Discard, "", 0),
		// Requests know their listener, for the count of refusals.
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), listenerKey{}, name)
		},
	}
	in.httpServers = append(in.httpServers, hs)
	in.lmu.Lock()
	in.addrs[name] = l.Addr()
	in.lmu.Unlock()
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.errc <- fmt.Errorf("%s listener: %w", name, err)
		}
	}()
	return nil
}

// listenerAddrs reports the listeners' addresses for the API. The map is
// complete before the console serves anything.
// rejections reports each listener's connections turned away by a limit,
// by reason, for /metrics.
func (in *instance) rejections() map[string]map[string]uint64 {
	in.lmu.Lock()
	servers := slices.Clone(in.servers)
	in.lmu.Unlock()
	m := make(map[string]map[string]uint64, len(servers))
	for _, srv := range servers {
		st := srv.Stats()
		m[srv.Name] = map[string]uint64{
			"max_conns":        st.RejectedMaxConns,
			"max_conns_per_ip": st.RejectedMaxConnsPerIP,
			"rate":             st.RejectedRate,
		}
	}
	return m
}

func (in *instance) listenerAddrs() map[string]string {
	in.lmu.Lock()
	defer in.lmu.Unlock()
	m := make(map[string]string, len(in.addrs))
	for name, a := range in.addrs {
		m[name] = a.String()
	}
	return m
}

// journalStats adapts the message journal's statistics to the
// management package's terms; nil with persistence off.
func journalStats(j *journal.Journal) func() management.JournalStats {
	if j == nil {
		return nil
	}
	return func() management.JournalStats {
		s := j.Stats()
		out := management.JournalStats{
			Appends: s.Appends, Syncs: s.Syncs, Batches: s.Batches, BatchRecords: s.BatchRecords,
			Compactions: s.Compactions, SyncSeconds: s.SyncSeconds,
			SyncLatencyBuckets: s.SyncLatencyBuckets, Files: s.Files, Bytes: s.Bytes,
		}
		// The journal counts cumulatively, management per bucket with the
		// slower-than-the-last-bound syncs last.
		var prev uint64
		for _, c := range s.SyncLatencyCounts {
			out.SyncLatencyCounts = append(out.SyncLatencyCounts, c-prev)
			prev = c
		}
		if s.Syncs >= prev {
			out.SyncLatencyCounts = append(out.SyncLatencyCounts, s.Syncs-prev)
		}
		return out
	}
}

// stop shuts the listeners down gracefully within ctx, then the broker.
func (in *instance) stop(ctx context.Context) error {
	var errs []error
	if in.cluster != nil {
		// Before the front-ends drain: a handler waiting for a group
		// without a leader gives up at once rather than hold the drain.
		in.cluster.Drain()
	}
	for _, p := range in.protocols {
		errs = append(errs, p.Close())
	}
	for _, hs := range in.httpServers {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("console: %w", err))
		}
	}
	if in.ws != nil {
		if err := in.ws.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("websocket: %w", err))
		}
	}
	for _, s := range in.servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
	}
	in.wg.Wait()
	if in.broker != nil {
		errs = append(errs, in.broker.Close())
	}
	if in.cluster != nil {
		errs = append(errs, in.cluster.Close())
	}
	in.sec.stop()
	if in.msgs != nil {
		errs = append(errs, in.msgs.Close(), in.bindings.Close())
	}
	return errors.Join(errs...)
}

// serve runs the broker until ctx is cancelled. ready, if not nil,
// receives the instance once every listener is up (for tests). With
// --ha shared-store it first takes the store lock, waiting for it as a
// backup (console only) while another broker holds it; without it, it
// gives up at once on a data directory another broker uses.
func serve(ctx context.Context, cfg Config, logw io.Writer, ready func(*instance)) error {
	// SIGHUP reloads the configuration (and the TLS certificate), from
	// the start on: one that arrives while the broker opens waits here.
	// It never stops the broker.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log, level := newLevelLogger(cfg, logw)
	in := newInstance(log)
	in.live = &liveConfig{in: in, level: level, cur: cfg, started: time.Now()}
	if cfg.HA == haSharedStore {
		in.node = &haNode{cfg: cfg, log: in.log.With().Str("component", "ha").Logger()}
		in.fence = &storeFence{}
		held, err := in.node.acquire(ctx, in, cfg)
		if err != nil || !held {
			in.stop(context.Background())
			in.node.release()
			if err == nil {
				in.log.Info().Msg("junction stopped (a backup)")
			}
			return err
		}
	}
	for {
		err := in.open(cfg)
		if err == nil {
			break
		}
		if in.node == nil || !errors.Is(err, journal.ErrLocked) {
			in.stop(context.Background())
			in.node.release()
			return err
		}
		// The store lock is ours but a journal is locked: by a broker
		// started without --ha, or by one whose store lock was taken from
		// it (a replaced lock file), which stops within a check interval.
		again, werr := in.node.waitForJournal(ctx, in, err)
		if !again {
			in.stop(context.Background())
			in.node.release()
			return werr
		}
	}
	if in.node != nil {
		if err := in.node.guard(in); err != nil {
			in.stop(context.Background())
			in.node.release()
			return err
		}
	}
	if err := in.startListeners(cfg); err != nil {
		in.stop(context.Background())
		in.node.release()
		return err
	}
	ev := in.log.Info().Str("version", version).Str("data_dir", cfg.DataDir)
	rs := in.broker.Recovered()
	if in.msgs != nil {
		ev = ev.Str("journal", filepath.Join(cfg.DataDir, "journal")).Int("recovered_messages", rs.Messages).Int("recovered_paged", rs.Paged).
			Int("recovered_queues", rs.Queues).Dur("recovery_time", rs.Duration)
	} else if in.cluster != nil {
		ev = ev.Str("journal", "the cluster's Raft log ("+filepath.Join(cfg.DataDir, "cluster")+"): replicated to a majority")
	} else {
		ev = ev.Str("journal", "off (persistence disabled: nothing survives a restart)")
	}
	if in.node != nil {
		in.node.becameLive(in.openTime)
		st := in.node.lock.State()
		ev = ev.Str("ha", haSharedStore).Str("ha_role", management.RoleLive).Uint64("ha_epoch", st.Epoch)
	}
	for name, a := range in.addrs {
		ev = ev.Str(name, a.String())
	}
	ev.Msg("junction started")
	if in.certs != nil {
		in.log.Info().Time("certificate_expires", in.certs.Leaf().NotAfter).Msg("TLS enabled; SIGHUP reloads the certificate")
	}
	done := make(chan struct{})
	var live sync.WaitGroup
	defer func() {
		close(done)
		live.Wait()
	}()
	live.Add(1)
	go func() {
		defer live.Done()
		for {
			select {
			case <-done:
				return
			case <-hup:
				in.live.reload("SIGHUP")
				if in.certs == nil {
					continue
				}
				if err := in.certs.Reload(); err != nil {
					in.log.Error().Err(err).Msg("TLS certificate reload failed; keeping the old one")
				} else {
					in.log.Info().Time("certificate_expires", in.certs.Leaf().NotAfter).Msg("TLS certificate reloaded")
				}
			}
		}
	}()
	if src := cfg.source; src != nil && src.file != "" && cfg.ConfigWatchInterval > 0 {
		live.Add(1)
		go func() {
			defer live.Done()
			in.live.watch(done, src.file, cfg.ConfigWatchInterval)
		}()
	}
	if cfg.Console.Listen != "" && cfg.Users == "" {
		in.log.Warn().Str("console", "http://"+in.addrs["console"].String()+"/").
			Msg("the console and its API are open to anyone who can reach them: no users are configured (keep them on loopback)")
	}
	in.ready.Store(true)
	if ready != nil {
		ready(in)
	}
	var runErr error
	var clusterFailed <-chan struct{}
	if in.cluster != nil {
		clusterFailed = in.cluster.Failed()
	}
	select {
	case <-ctx.Done():
	case runErr = <-in.errc:
	case <-clusterFailed:
		runErr = fmt.Errorf("cluster node stopped: %w", in.cluster.Err())
	}
	in.log.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := in.stop(sctx); err != nil {
		in.log.Warn().Err(err).Msg("shutdown was not clean")
	}
	// The store lock goes last, once nothing writes the store any more.
	if err := in.node.release(); err != nil {
		in.log.Warn().Err(err).Msg("releasing the store lock")
	}
	in.log.Info().Msg("junction stopped")
	return runErr
}
