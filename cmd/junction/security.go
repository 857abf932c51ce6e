package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/security"
)

// usersReloadInterval is how often the users file is polled for changes.
var usersReloadInterval = 2 * time.Second

// triBoolOpt ties a *bool that may stay unset (nil: decide
// automatically) to a flag that may be given bare (--allow-anonymous).
func triBoolOpt(name, path, usage string, field func(*Config) **bool) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			if v == "" || v == "auto" {
				*field(c) = nil
				return nil
			}
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("invalid boolean %q", v)
			}
			*field(c) = &b
			return nil
		},
		func(c *Config) string {
			if p := *field(c); p != nil {
				return strconv.FormatBool(*p)
			}
			return ""
		}}
}

// bareFlags are the options whose flag may be given without a value,
// meaning true.
var bareFlags = map[string]bool{"allow-anonymous": true, "cluster-join": true, "cluster-insecure": true}

// optionFlag is the flag.Value of one option: its text, and whether the
// flag may be given bare.
type optionFlag struct {
	v    *string
	bare bool
}

func (f *optionFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}

func (f *optionFlag) Set(s string) error { *f.v = s; return nil }

// IsBoolFlag lets the flag package accept the bare form.
func (f *optionFlag) IsBoolFlag() bool { return f.bare }

// listenAddrs lists every configured listener by its configuration path.
func (c *Config) listenAddrs() map[string]string {
	m := map[string]string{}
	for path, addr := range map[string]string{
		"stomp.listen": c.Stomp.Listen, "mqtt.listen": c.MQTT.Listen, "amqp.listen": c.AMQP.Listen,
		"websocket.listen": c.WebSocket.Listen, "all.listen": c.All.Listen, "console.listen": c.Console.Listen,
		"tls.stomp": c.TLS.Stomp, "tls.mqtt": c.TLS.MQTT, "tls.amqp": c.TLS.AMQP, "tls.websocket": c.TLS.WebSocket,
	} {
		if addr != "" {
			m[path] = addr
		}
	}
	return m
}

// isLoopback reports whether a listen address binds only loopback
// interfaces: 127.0.0.0/8, ::1 or "localhost". An empty host (every
// interface) and other names are not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// anonymousPolicy decides whether anonymous clients are accepted:
// --allow-anonymous when given; otherwise yes while every listener is on
// loopback, no with a users file, and with neither an error that refuses
// to start (the reason says which listener and what to do).
func (c *Config) anonymousPolicy() (allow bool, why string, err error) {
	if c.AllowAnonymous != nil {
		if *c.AllowAnonymous {
			return true, "--allow-anonymous", nil
		}
		return false, "--allow-anonymous=false", nil
	}
	addrs := c.listenAddrs()
	paths := make([]string, 0, len(addrs))
	for p := range addrs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if isLoopback(addrs[p]) {
			continue
		}
		if c.Users != "" {
			return false, fmt.Sprintf("%s binds %s, which is not loopback", p, addrs[p]), nil
		}
		return false, "", fmt.Errorf("%s binds %s, which is not loopback, and no users are configured: "+
			"anyone who can reach it could use the broker. Configure users (--users FILE; anonymous clients are "+
			"then refused) or accept anonymous clients explicitly with --allow-anonymous", p, addrs[p])
	}
	return true, "every listener is on loopback", nil
}

// validateSecurity adds the security options' errors to validate's.
func (c *Config) validateSecurity(bad func(path, format string, args ...any)) {
	for i, s := range c.SecuritySettings {
		if err := s.Validate(); err != nil {
			bad(fmt.Sprintf("security-settings.%d", i), "%v", err)
		}
	}
	for i, r := range c.AnonymousRoles {
		if r == "" || strings.ContainsAny(r, " \t\r\n") {
			bad(fmt.Sprintf("anonymous-roles.%d", i), "invalid role %q", r)
		}
	}
	if _, _, err := c.anonymousPolicy(); err != nil {
		bad("allow-anonymous", "%v", err)
	}
}

// brokerSecurity is the broker's users and permissions: the store core
// authenticates and authorizes with, and the goroutine that reloads the
// users file (owned here: started by start, stopped by stop).
type brokerSecurity struct {
	store     *security.Store
	authorize bool // install the store as core's Authorizer
	log       zerolog.Logger
	reloader  *security.Reloader
	// broker is told of each reload. start sets it: a shared-store backup
	// starts the watcher before the broker exists (its console checks
	// logins) and sets it again at the takeover.
	broker atomic.Pointer[core.Broker]
	cancel context.CancelFunc
	done   chan struct{}
}

// newBrokerSecurity loads the users file and builds the store; it
// refuses (with the reason, also logged) a configuration that would let
// anonymous clients in from the network without --allow-anonymous.
func newBrokerSecurity(cfg Config, log zerolog.Logger) (*brokerSecurity, error) {
	log = log.With().Str("component", "security").Logger()
	allow, why, err := cfg.anonymousPolicy()
	if err != nil {
		log.Error().Err(err).Msg("refusing to start")
		return nil, err
	}
	opts := security.Options{Settings: cfg.SecuritySettings, AnonymousRoles: cfg.AnonymousRoles, AllowAnonymous: allow}
	if cfg.Users != "" {
		u, err := security.LoadUsers(cfg.Users)
		if err != nil {
			return nil, fmt.Errorf("users file: %w", err)
		}
		opts.Users = u
	}
	store, err := security.New(opts)
	if err != nil {
		return nil, fmt.Errorf("security settings: %w", err)
	}
	s := &brokerSecurity{store: store, log: log,
		// Without users or settings, everything stays allowed, as before
		// users existed.
		authorize: cfg.Users != "" || len(cfg.SecuritySettings) > 0,
	}
	ev := log.Info().Bool("anonymous", allow).Str("anonymous_because", why)
	if opts.Users != nil {
		ev = ev.Str("users_file", cfg.Users).Int("users", len(opts.Users.Users))
	} else {
		ev = ev.Str("users_file", "none")
	}
	ev.Msg("authentication configured")
	if cfg.Users != "" {
		s.reloader = &security.Reloader{
			Path: cfg.Users, Store: store, Interval: usersReloadInterval,
			OnReload: func(u *security.Users) {
				// Roles changed: core drops the permission decisions it
				// cached (sessions', wildcard subscriptions').
				if b := s.broker.Load(); b != nil {
					b.PermissionsChanged()
				}
				log.Info().Str("users_file", cfg.Users).Int("users", len(u.Users)).Msg("users file reloaded")
			},
			OnError: func(err error) {
				log.Error().Err(err).Str("users_file", cfg.Users).Msg("users file not reloaded; keeping the previous users")
			},
		}
	}
	return s, nil
}

// configure sets core's Authenticator and Authorizer.
func (s *brokerSecurity) configure(bcfg *core.Config) {
	bcfg.Authenticator = s.store
	if s.authorize {
		bcfg.Authorizer = s.store
	}
}

// start starts watching the users file, if there is one; each reload
// is applied to b's cached permission decisions.
func (s *brokerSecurity) start(b *core.Broker) {
	s.broker.Store(b)
	if s.reloader == nil || s.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		s.reloader.Run(ctx)
	}()
}

// stop stops the watcher and waits for it; safe to call more than once.
func (s *brokerSecurity) stop() {
	if s == nil || s.done == nil {
		return
	}
	s.cancel()
	<-s.done
}
