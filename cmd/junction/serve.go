package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/persistence/large"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/transports"
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
	addrs     map[string]net.Addr
	wg        sync.WaitGroup
	errc      chan error
}

func newLogger(cfg Config, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(cfg.LogLevel)
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
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
		Dir: filepath.Join(cfg.DataDir, "bindings"), FileSize: 1 << 20,
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
	log := newLogger(cfg, logw)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	bcfg := core.Config{AddressSettings: cfg.AddressSettings, Logger: log.With().Str("component", "core").Logger()}
	var msgs, bindings *journal.Journal
	if cfg.Persistence.Enabled {
		var err error
		if msgs, bindings, err = openJournals(cfg, log); err != nil {
			return nil, err
		}
		bcfg.Messages, bcfg.Bindings = msgs, bindings
		ls, err := large.Open(filepath.Join(cfg.DataDir, "large"), fs.OS())
		if err != nil {
			msgs.Close()
			bindings.Close()
			return nil, fmt.Errorf("large-message store: %w", err)
		}
		bcfg.Large, bcfg.LargeMessageThreshold = ls, int(cfg.Persistence.LargeMessageThreshold)
	}
	b, err := core.New(bcfg)
	if err != nil {
		if msgs != nil {
			msgs.Close()
			bindings.Close()
		}
		return nil, err
	}
	in := &instance{log: log, broker: b, msgs: msgs, bindings: bindings, addrs: make(map[string]net.Addr), errc: make(chan error, 4)}
	if cfg.MQTT.Listen != "" {
		ms, err := mqtt.New(mqtt.Config{
			MaxPacketSize:    int(cfg.MQTT.MaxPacketSize),
			MaxSessionExpiry: cfg.MQTT.SessionExpiry,
			ReceiveMaximum:   cfg.MQTT.ReceiveMaximum,
			MaxSessionBytes:  int64(cfg.MQTT.MaxSessionBytes),
			Logger:           log.With().Str("component", "mqtt").Logger(),
		}, b)
		if err != nil {
			in.stop(context.Background())
			return nil, fmt.Errorf("mqtt: %w", err)
		}
		in.protocols = append(in.protocols, ms)
		if err := in.listen("mqtt", cfg.MQTT.Listen, cfg.MaxConnections, ms.ServeConn, nil); err != nil {
			in.stop(context.Background())
			return nil, err
		}
	}
	if cfg.AMQP.Listen != "" {
		idle := cfg.AMQP.IdleTimeout
		if idle == 0 {
			idle = -1
		}
		as := amqp.New(amqp.Config{
			MaxFrameSize:   uint32(cfg.AMQP.MaxFrameSize),
			MaxMessageSize: int(cfg.AMQP.MaxMessageSize),
			IdleTimeout:    idle,
			LinkCredit:     uint32(cfg.AMQP.LinkCredit),
			RequireSASL:    cfg.AMQP.RequireSASL,
			Version:        version,
			Logger:         log.With().Str("component", "amqp").Logger(),
		}, b)
		if err := in.listen("amqp", cfg.AMQP.Listen, cfg.MaxConnections, as.ServeConn, as.Reject); err != nil {
			in.stop(context.Background())
			return nil, err
		}
	}
	if cfg.Stomp.Listen != "" {
		hb := cfg.Stomp.HeartBeat
		if hb == 0 {
			hb = -1
		}
		ss := stomp.New(stomp.Config{
			MaxFrameSize:     int(cfg.Stomp.MaxFrameSize),
			MaxHeaders:       cfg.Stomp.MaxHeaders,
			MaxHeaderLength:  int(cfg.Stomp.MaxHeaderLength),
			HeartBeatSend:    hb,
			HeartBeatReceive: hb,
			DefaultPrefetch:  cfg.Stomp.Prefetch,
			ServerName:       "Junction/" + version,
			Logger:           log.With().Str("component", "stomp").Logger(),
		}, b)
		if err := in.listen("stomp", cfg.Stomp.Listen, cfg.MaxConnections, ss.ServeConn, ss.Reject); err != nil {
			in.stop(context.Background())
			return nil, err
		}
	}
	return in, nil
}

func (in *instance) listen(name, addr string, maxConns int, h transports.Handler, onLimit func(net.Conn)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	log := in.log.With().Str("listener", name).Logger()
	srv := &transports.Server{
		Name: name, Handler: h, MaxConns: maxConns, OnLimit: onLimit,
		Events: transports.Events{
			OnAcceptError: func(err error, d time.Duration) {
				log.Warn().Err(err).Dur("retry_in", d).Msg("accept failed")
			},
		},
	}
	in.servers = append(in.servers, srv)
	in.addrs[name] = l.Addr()
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, transports.ErrServerClosed) {
			in.errc <- fmt.Errorf("%s listener: %w", name, err)
		}
	}()
	return nil
}

// stop shuts the listeners down gracefully within ctx, then the broker.
func (in *instance) stop(ctx context.Context) error {
	var errs []error
	for _, p := range in.protocols {
		errs = append(errs, p.Close())
	}
	for _, s := range in.servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
	}
	in.wg.Wait()
	errs = append(errs, in.broker.Close())
	if in.msgs != nil {
		errs = append(errs, in.msgs.Close(), in.bindings.Close())
	}
	return errors.Join(errs...)
}

// serve runs the broker until ctx is cancelled. ready, if not nil,
// receives the instance once every listener is up (for tests).
func serve(ctx context.Context, cfg Config, logw io.Writer, ready func(*instance)) error {
	in, err := start(cfg, logw)
	if err != nil {
		return err
	}
	ev := in.log.Info().Str("version", version).Str("data_dir", cfg.DataDir)
	if in.msgs != nil {
		rs := in.broker.Recovered()
		ev = ev.Str("journal", filepath.Join(cfg.DataDir, "journal")).Int("recovered_messages", rs.Messages).
			Int("recovered_queues", rs.Queues).Dur("recovery_time", rs.Duration)
	} else {
		ev = ev.Str("journal", "off (persistence disabled: nothing survives a restart)")
	}
	for name, a := range in.addrs {
		ev = ev.Str(name, a.String())
	}
	ev.Msg("junction started")
	if ready != nil {
		ready(in)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-in.errc:
	}
	in.log.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := in.stop(sctx); err != nil {
		in.log.Warn().Err(err).Msg("shutdown was not clean")
	}
	in.log.Info().Msg("junction stopped")
	return runErr
}
