package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/hostlist"
	"github.com/junctionmq/junction/security"
)

// Config is the whole configuration of a broker. Defaults come from
// defaultConfig; a YAML file (--config), JUNCTION_* environment variables
// and flags override them, in that order.
type Config struct {
	DataDir         string            `yaml:"data-dir"`
	LogLevel        string            `yaml:"log-level"`
	LogFormat       string            `yaml:"log-format"`
	ShutdownTimeout time.Duration     `yaml:"shutdown-timeout"`
	MaxConnections  int               `yaml:"max-connections"`
	Limits          LimitsConfig      `yaml:"limits"`
	Stomp           StompConfig       `yaml:"stomp"`
	MQTT            MQTTConfig        `yaml:"mqtt"`
	AMQP            AMQPConfig        `yaml:"amqp"`
	WebSocket       WebSocketConfig   `yaml:"websocket"`
	All             AllConfig         `yaml:"all"`
	TLS             TLSConfig         `yaml:"tls"`
	Console         ConsoleConfig     `yaml:"console"`
	Persistence     PersistenceConfig `yaml:"persistence"`
	// MaxMemory is the budget for messages held in memory; 0 means a
	// quarter of the machine's (or the cgroup's) memory.
	MaxMemory ByteSize `yaml:"max-memory"`
	// AddressSettings override the default address policies by pattern.
	AddressSettings []core.AddressSettings `yaml:"address-settings"`
	// Users is the users file (package security); empty: no users.
	Users string `yaml:"users"`
	// AllowAnonymous accepts clients without credentials; unset (nil),
	// only while every listener is on loopback (see anonymousPolicy).
	AllowAnonymous *bool `yaml:"allow-anonymous"`
	// AnonymousRoles are anonymous clients' roles (default [anonymous]).
	AnonymousRoles []string `yaml:"anonymous-roles"`
	// Notifications publishes broker events as messages (docs/features.md).
	Notifications core.EventsConfig `yaml:"notifications"`
	// Diverts copy or move what reaches an address to other addresses;
	// VirtualTopics turns on ActiveMQ's virtual topics (docs/features.md).
	Diverts       []core.Divert `yaml:"diverts"`
	VirtualTopics bool          `yaml:"virtual-topics"`
	// SecuritySettings grant permissions by address pattern, over
	// security.DefaultSettings.
	SecuritySettings []security.Setting `yaml:"security-settings"`
	// Cluster makes the broker a node of a replicated cluster.
	Cluster ClusterConfig `yaml:"cluster"`
	// HA is "off" or "shared-store": brokers started on one data
	// directory, the one holding its lock live, the others backups
	// (docs/ha.md).
	HA string `yaml:"ha"`
	// HALockPoll is how often a backup tries the store lock.
	HALockPoll time.Duration `yaml:"ha-lock-poll"`
	// HACheckInterval and HACheckTimeout: how often the live broker
	// proves it still holds the store, and how long a check may take.
	HACheckInterval time.Duration `yaml:"ha-check-interval"`
	HACheckTimeout  time.Duration `yaml:"ha-check-timeout"`
	// ConfigWatchInterval is how often the --config file is checked for
	// a change, which reloads it (reload.go); 0 disables the watch.
	ConfigWatchInterval time.Duration `yaml:"config-watch-interval"`

	// source is where the configuration was read from, to read it
	// again (reload.go); nil when it was built in a test.
	source *configSource
}

// haSharedStore is the one HA mode.
const haSharedStore = "shared-store"

// StompConfig configures the STOMP listener.
type StompConfig struct {
	Listen          string        `yaml:"listen"`
	MaxFrameSize    ByteSize      `yaml:"max-frame-size"`
	MaxMessageSize  ByteSize      `yaml:"max-message-size"`
	MaxHeaders      int           `yaml:"max-headers"`
	MaxHeaderLength ByteSize      `yaml:"max-header-length"`
	HeartBeatMin    time.Duration `yaml:"heart-beat-min"`
	Prefetch        int           `yaml:"prefetch"`
	// HeartBeat is heart-beat-min's former name, still read from files
	// written for earlier versions (it was the interval offered and
	// asked for, which the minimum now is at most).
	HeartBeat *time.Duration `yaml:"heart-beat,omitempty"`
}

func defaultConfig() Config {
	return Config{
		DataDir:         "./data",
		LogLevel:        "info",
		LogFormat:       "console",
		ShutdownTimeout: 10 * time.Second,
		MaxConnections:  10000,
		Limits:          defaultLimits(),
		Stomp: StompConfig{
			Listen:          "127.0.0.1:61613",
			MaxFrameSize:    10 << 20,
			MaxMessageSize:  100 << 20,
			MaxHeaders:      1000,
			MaxHeaderLength: 8 << 10,
			HeartBeatMin:    time.Second,
			Prefetch:        1000,
		},
		MQTT: MQTTConfig{
			Listen:         "127.0.0.1:1883",
			MaxPacketSize:  10 << 20,
			MaxMessageSize: 256 << 20,
			SessionExpiry:  time.Hour,
			ReceiveMaximum: 1024,

			MaxSessionBytes: 64 << 20,
		},
		AMQP: AMQPConfig{
			Listen:              "127.0.0.1:5672",
			MaxFrameSize:        256 << 10,
			MaxMessageSize:      64 << 20,
			MaxLargeMessageSize: 1 << 30,
			IdleTimeout:         time.Minute,
			LinkCredit:          1000,
		},
		WebSocket: WebSocketConfig{
			Listen: "127.0.0.1:61614",
			// A largest streamed STOMP message, sent in one message,
			// with room for the WebSocket framing: a message is read
			// as a stream, never held whole.
			MaxMessageSize: 100<<20 + 64<<10,
		},
		All: AllConfig{
			Listen:        "127.0.0.1:61616",
			DetectTimeout: 5 * time.Second,
		},
		TLS:     TLSConfig{HandshakeTimeout: 10 * time.Second},
		Cluster: ClusterConfig{Groups: 8, ElectionTimeout: time.Second},
		Console: ConsoleConfig{Listen: "127.0.0.1:8161"},
		Persistence: PersistenceConfig{
			Enabled:         true,
			FileSize:        10 << 20,
			MinFiles:        2,
			PoolFiles:       8,
			CompactMinRatio: 0.3,
			CompactMinFiles: 10,
			Recovery:        "strict",

			LargeMessageThreshold: 1 << 20,
			PageSegmentSize:       64 << 20,
			MinFreeDisk:           256 << 20,
		},
		Notifications: core.EventsConfig{
			Enabled: true, Address: core.DefaultNotificationAddress, Buffer: core.DefaultEventBuffer,
		},
		HA:              "off",
		HALockPoll:      500 * time.Millisecond,
		HACheckInterval: time.Second,
		HACheckTimeout:  5 * time.Second,

		ConfigWatchInterval: 2 * time.Second,
	}
}

// MQTTConfig configures the MQTT listener.
type MQTTConfig struct {
	Listen         string        `yaml:"listen"`
	MaxPacketSize  ByteSize      `yaml:"max-packet-size"`
	MaxMessageSize ByteSize      `yaml:"max-message-size"`
	SessionExpiry  time.Duration `yaml:"max-session-expiry"`
	ReceiveMaximum int           `yaml:"receive-maximum"`
	// MaxSessionBytes is each persistent-session subscription's budget.
	MaxSessionBytes ByteSize `yaml:"max-session-bytes"`
}

// AMQPConfig configures the AMQP 1.0 listener.
type AMQPConfig struct {
	Listen         string   `yaml:"listen"`
	MaxFrameSize   ByteSize `yaml:"max-frame-size"`
	MaxMessageSize ByteSize `yaml:"max-message-size"`
	// MaxLargeMessageSize bounds a message streamed to the large-message
	// store as its frames arrive.
	MaxLargeMessageSize ByteSize      `yaml:"max-large-message-size"`
	IdleTimeout         time.Duration `yaml:"idle-timeout"`
	LinkCredit          int           `yaml:"link-credit"`
	RequireSASL         bool          `yaml:"require-sasl"`
}

// WebSocketConfig configures the WebSocket endpoint (STOMP, MQTT and
// AMQP over WebSockets, chosen by subprotocol or path).
type WebSocketConfig struct {
	Listen string `yaml:"listen"`
	// AllowedHosts, comma-separated, are Host names (host or host:port)
	// WebSocket upgrades may be addressed to besides the broker's own
	// (see hostGuard); "*" allows any.
	AllowedHosts string `yaml:"allowed-hosts"`
	// AllowedOrigins, comma-separated; empty allows pages from the
	// allowed hosts, "*" allows any.
	AllowedOrigins string   `yaml:"allowed-origins"`
	MaxMessageSize ByteSize `yaml:"max-message-size"`
}

// AllConfig configures the one port on which every protocol is
// detected from its first bytes.
type AllConfig struct {
	Listen        string        `yaml:"listen"`
	DetectTimeout time.Duration `yaml:"detect-timeout"`
}

// ConsoleConfig configures the HTTP listener of the web console, the
// REST API (/api/v1/), /metrics, /healthz and /readyz.
type ConsoleConfig struct {
	Listen string `yaml:"listen"`
	// AllowedHosts, comma-separated, are Host names (host or host:port)
	// the console, API and /metrics answer to besides the broker's own,
	// on whichever port they are served; "*" allows any.
	AllowedHosts string `yaml:"allowed-hosts"`
}

// TLSConfig holds the certificate every TLS listener uses and those
// listeners' addresses (each empty by default). With a certificate, the
// one port also accepts TLS.
type TLSConfig struct {
	Cert              string        `yaml:"cert"`
	Key               string        `yaml:"key"`
	ClientCA          string        `yaml:"client-ca"`
	RequireClientCert bool          `yaml:"require-client-cert"`
	HandshakeTimeout  time.Duration `yaml:"handshake-timeout"`
	Stomp             string        `yaml:"stomp"`
	MQTT              string        `yaml:"mqtt"`
	AMQP              string        `yaml:"amqp"`
	WebSocket         string        `yaml:"websocket"`
}

// enabled reports whether a certificate is configured.
func (t TLSConfig) enabled() bool { return t.Cert != "" }

// PersistenceConfig configures the journals under the data directory.
type PersistenceConfig struct {
	// Enabled keeps durable messages and definitions on disk; off, the
	// broker keeps everything in memory and never touches the disk.
	Enabled         bool     `yaml:"enabled"`
	FileSize        ByteSize `yaml:"journal-file-size"`
	MinFiles        int      `yaml:"journal-min-files"`
	PoolFiles       int      `yaml:"journal-pool-files"`
	CompactMinRatio float64  `yaml:"compact-min-ratio"`
	CompactMinFiles int      `yaml:"compact-min-files"`
	// Recovery is "strict" (refuse to start on damage in the middle of
	// the journal) or "salvage" (keep what validates, report the rest).
	Recovery string `yaml:"recovery"`
	// LargeMessageThreshold: durable bodies above it go to files of their
	// own under data-dir/large instead of the journal.
	LargeMessageThreshold ByteSize `yaml:"large-message-threshold"`
	// PageSegmentSize is the size of each page file of a paging queue.
	PageSegmentSize ByteSize `yaml:"page-segment-size"`
	// MaxDiskUsage bounds the journals and page stores together (0 = no
	// bound); MinFreeDisk is the free space to keep on their file
	// system. Past either, durable sends are refused.
	MaxDiskUsage ByteSize `yaml:"max-disk-usage"`
	MinFreeDisk  ByteSize `yaml:"min-free-disk"`
}

// ByteSize is a size in bytes, written as a number with an optional
// unit: B, KiB, MiB, GiB (or KB, MB, GB, meaning the same powers of two).
type ByteSize int64

// ParseByteSize parses "10MiB", "512KiB", "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 4096, 512KiB, 10MiB)", s)
	}
	return ByteSize(n * mult), nil
}

// MarshalYAML writes the size in the largest unit that divides it
// (10MiB, 512KiB, 4096), as ParseByteSize reads it.
func (b ByteSize) MarshalYAML() (any, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix, nil
		}
	}
	return int64(b), nil
}

// UnmarshalYAML accepts a number or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// option ties one configuration value to its flag and environment
// variable (JUNCTION_ + the flag name in upper case, '-' as '_') and to
// its path in the YAML file, so the three sources cannot drift apart.
type option struct {
	flag  string
	path  string // YAML path, for error lines
	usage string
	set   func(c *Config, v string) error
	get   func(c *Config) string
}

func stringOpt(name, path, usage string, field func(*Config) *string) option {
	return option{name, path, usage,
		func(c *Config, v string) error { *field(c) = v; return nil },
		func(c *Config) string { return *field(c) }}
}

func intOpt(name, path, usage string, field func(*Config) *int) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("invalid integer %q", v)
			}
			*field(c) = n
			return nil
		},
		func(c *Config) string { return strconv.Itoa(*field(c)) }}
}

func durationOpt(name, path, usage string, field func(*Config) *time.Duration) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("invalid duration %q (want e.g. 10s, 500ms)", v)
			}
			*field(c) = d
			return nil
		},
		func(c *Config) string { return field(c).String() }}
}

func sizeOpt(name, path, usage string, field func(*Config) *ByteSize) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			b, err := ParseByteSize(v)
			if err != nil {
				return err
			}
			*field(c) = b
			return nil
		},
		func(c *Config) string { return strconv.FormatInt(int64(*field(c)), 10) }}
}

func boolOpt(name, path, usage string, field func(*Config) *bool) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("invalid boolean %q", v)
			}
			*field(c) = b
			return nil
		},
		func(c *Config) string { return strconv.FormatBool(*field(c)) }}
}

func floatOpt(name, path, usage string, field func(*Config) *float64) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("invalid number %q", v)
			}
			*field(c) = f
			return nil
		},
		func(c *Config) string { return strconv.FormatFloat(*field(c), 'g', -1, 64) }}
}

var options = append([]option{
	stringOpt("data-dir", "data-dir", "directory for the broker's data", func(c *Config) *string { return &c.DataDir }),
	stringOpt("stomp", "stomp.listen", "STOMP listen address (empty disables)", func(c *Config) *string { return &c.Stomp.Listen }),
	stringOpt("log-level", "log-level", "log level: debug, info, warn, error", func(c *Config) *string { return &c.LogLevel }),
	stringOpt("log-format", "log-format", "log format: console or json", func(c *Config) *string { return &c.LogFormat }),
	durationOpt("shutdown-timeout", "shutdown-timeout", "how long a graceful shutdown may take", func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
	intOpt("max-connections", "max-connections", "connections per listener (0 = unlimited)", func(c *Config) *int { return &c.MaxConnections }),
	intOpt("max-connections-per-ip", "limits.max-connections-per-ip", "connections one source IP may have open on a listener (0 = unlimited)", func(c *Config) *int { return &c.Limits.MaxConnectionsPerIP }),
	floatOpt("connection-rate-per-ip", "limits.connection-rate-per-ip", "connection attempts per second one source IP may make on a listener; those over it are closed at once (0 = unlimited)", func(c *Config) *float64 { return &c.Limits.ConnectionRatePerIP }),
	intOpt("connection-burst-per-ip", "limits.connection-burst-per-ip", "connection attempts one source IP may make at once before --connection-rate-per-ip applies", func(c *Config) *int { return &c.Limits.ConnectionBurstPerIP }),
	durationOpt("handshake-timeout", "limits.handshake-timeout", "close a connection that has not finished its protocol handshake (STOMP CONNECT, MQTT CONNECT, AMQP headers, SASL and open) in this time", func(c *Config) *time.Duration { return &c.Limits.HandshakeTimeout }),
	intOpt("max-subscriptions-per-connection", "limits.max-subscriptions-per-connection", "STOMP subscriptions, MQTT topic filters or AMQP links (consumers and producers) one connection may hold (0 = unlimited)", func(c *Config) *int { return &c.Limits.MaxSubscriptions }),
	intOpt("max-auto-created-queues-per-user", "limits.max-auto-created-queues-per-user", "queues one user's sends and consumers may auto-create (anonymous clients share one count; 0 = unlimited)", func(c *Config) *int { return &c.Limits.MaxAutoCreatedQueues }),
	sizeOpt("preauth-max-frame-size", "limits.preauth-max-frame-size", "largest frame or packet a client may send before it has authenticated (STOMP and MQTT CONNECT; AMQP SASL frames are 512 bytes)", func(c *Config) *ByteSize { return &c.Limits.PreAuthMaxFrameSize }),
	sizeOpt("preauth-budget", "limits.preauth-budget", "bytes held for all connections not yet authenticated together; past it new ones are refused as busy (0 = unlimited)", func(c *Config) *ByteSize { return &c.Limits.PreAuthBudget }),
	durationOpt("frame-timeout", "limits.frame-timeout", "time one frame may take once its first byte has arrived, plus 1s per --frame-min-rate bytes received (0 disables)", func(c *Config) *time.Duration { return &c.Limits.FrameTimeout }),
	sizeOpt("frame-min-rate", "limits.frame-min-rate", "bytes per second that earn a frame one more second (a steady upload at this rate is never cut)", func(c *Config) *ByteSize { return &c.Limits.FrameMinRate }),
	sizeOpt("stomp-max-frame-size", "stomp.max-frame-size", "largest STOMP frame accepted", func(c *Config) *ByteSize { return &c.Stomp.MaxFrameSize }),
	sizeOpt("stomp-max-message-size", "stomp.max-message-size", "largest STOMP SEND whose body is streamed to disk as it arrives (one above the large-message threshold)", func(c *Config) *ByteSize { return &c.Stomp.MaxMessageSize }),
	intOpt("stomp-max-headers", "stomp.max-headers", "most headers in a STOMP frame", func(c *Config) *int { return &c.Stomp.MaxHeaders }),
	sizeOpt("stomp-max-header-length", "stomp.max-header-length", "longest STOMP header line", func(c *Config) *ByteSize { return &c.Stomp.MaxHeaderLength }),
	durationOpt("stomp-heart-beat-min", "stomp.heart-beat-min", "shortest STOMP heart-beat interval the broker agrees to, each way: a client gets the beats it asks for, never faster; one silent for 1.5 times its promised interval is disconnected (0 disables heart-beats)", func(c *Config) *time.Duration { return &c.Stomp.HeartBeatMin }),
	durationOpt("stomp-heart-beat", "stomp.heart-beat-min", "deprecated: the former name of --stomp-heart-beat-min", func(c *Config) *time.Duration { return &c.Stomp.HeartBeatMin }),
	intOpt("stomp-prefetch", "stomp.prefetch", "default STOMP subscription prefetch window", func(c *Config) *int { return &c.Stomp.Prefetch }),
	stringOpt("mqtt", "mqtt.listen", "MQTT listen address (empty disables)", func(c *Config) *string { return &c.MQTT.Listen }),
	sizeOpt("mqtt-max-message-size", "mqtt.max-message-size", "largest MQTT PUBLISH whose payload is streamed to disk as it arrives (one above the large-message threshold); at most 256MiB, MQTT's limit", func(c *Config) *ByteSize { return &c.MQTT.MaxMessageSize }),
	sizeOpt("mqtt-max-packet-size", "mqtt.max-packet-size", "largest MQTT packet accepted", func(c *Config) *ByteSize { return &c.MQTT.MaxPacketSize }),
	sizeOpt("mqtt-max-session-bytes", "mqtt.max-session-bytes", "bytes one persistent-session subscription holds for an offline device", func(c *Config) *ByteSize { return &c.MQTT.MaxSessionBytes }),
	durationOpt("mqtt-max-session-expiry", "mqtt.max-session-expiry", "longest time a disconnected MQTT session is kept", func(c *Config) *time.Duration { return &c.MQTT.SessionExpiry }),
	stringOpt("amqp", "amqp.listen", "AMQP 1.0 listen address (empty disables)", func(c *Config) *string { return &c.AMQP.Listen }),
	sizeOpt("amqp-max-frame-size", "amqp.max-frame-size", "largest AMQP frame accepted", func(c *Config) *ByteSize { return &c.AMQP.MaxFrameSize }),
	sizeOpt("amqp-max-message-size", "amqp.max-message-size", "largest AMQP message accepted (reassembled from frames)", func(c *Config) *ByteSize { return &c.AMQP.MaxMessageSize }),
	sizeOpt("amqp-max-large-message-size", "amqp.max-large-message-size", "largest AMQP message whose body (one data section above the large-message threshold) is streamed to disk as its frames arrive; at most 4GiB", func(c *Config) *ByteSize { return &c.AMQP.MaxLargeMessageSize }),
	durationOpt("amqp-idle-timeout", "amqp.idle-timeout", "close an AMQP connection silent this long (half is advertised; 0 disables)", func(c *Config) *time.Duration { return &c.AMQP.IdleTimeout }),
	intOpt("amqp-link-credit", "amqp.link-credit", "credit granted to each AMQP sender link: its messages in flight", func(c *Config) *int { return &c.AMQP.LinkCredit }),
	boolOpt("amqp-require-sasl", "amqp.require-sasl", "refuse AMQP clients that skip SASL", func(c *Config) *bool { return &c.AMQP.RequireSASL }),
	stringOpt("ws", "websocket.listen", "WebSocket listen address for STOMP, MQTT and AMQP (empty disables)", func(c *Config) *string { return &c.WebSocket.Listen }),
	stringOpt("ws-allowed-hosts", "websocket.allowed-hosts", "comma-separated Host names (host or host:port) WebSocket upgrades may be addressed to besides the listeners' addresses, localhost and the machine's names; others get 421 (* any)", func(c *Config) *string { return &c.WebSocket.AllowedHosts }),
	stringOpt("ws-allowed-origins", "websocket.allowed-origins", "comma-separated origins allowed to open WebSockets (empty: pages from the allowed hosts; * any)", func(c *Config) *string { return &c.WebSocket.AllowedOrigins }),
	sizeOpt("ws-max-message-size", "websocket.max-message-size", "largest WebSocket message accepted", func(c *Config) *ByteSize { return &c.WebSocket.MaxMessageSize }),
	stringOpt("all", "all.listen", "one listen address for every protocol, detected from the first bytes (empty disables)", func(c *Config) *string { return &c.All.Listen }),
	durationOpt("detect-timeout", "all.detect-timeout", "how long the one port waits for a connection's first bytes", func(c *Config) *time.Duration { return &c.All.DetectTimeout }),
	stringOpt("console", "console.listen", "web console, REST API and /metrics listen address (empty disables)", func(c *Config) *string { return &c.Console.Listen }),
	stringOpt("console-allowed-hosts", "console.allowed-hosts", "comma-separated Host names (host or host:port) the console, REST API and /metrics answer to besides the listeners' addresses, localhost and the machine's names; others get 421 (* any)", func(c *Config) *string { return &c.Console.AllowedHosts }),
	stringOpt("tls-cert", "tls.cert", "PEM certificate (chain) for the TLS listeners; reloaded on SIGHUP", func(c *Config) *string { return &c.TLS.Cert }),
	stringOpt("tls-key", "tls.key", "PEM private key of --tls-cert", func(c *Config) *string { return &c.TLS.Key }),
	stringOpt("tls-client-ca", "tls.client-ca", "PEM CA certificates that client certificates are verified against", func(c *Config) *string { return &c.TLS.ClientCA }),
	boolOpt("tls-require-client-cert", "tls.require-client-cert", "refuse TLS clients without a certificate signed by --tls-client-ca", func(c *Config) *bool { return &c.TLS.RequireClientCert }),
	durationOpt("tls-handshake-timeout", "tls.handshake-timeout", "bound on a TLS handshake", func(c *Config) *time.Duration { return &c.TLS.HandshakeTimeout }),
	stringOpt("stomp-tls", "tls.stomp", "STOMP over TLS listen address (stomp+ssl; needs --tls-cert)", func(c *Config) *string { return &c.TLS.Stomp }),
	stringOpt("mqtt-tls", "tls.mqtt", "MQTT over TLS listen address (mqtts; needs --tls-cert)", func(c *Config) *string { return &c.TLS.MQTT }),
	stringOpt("amqp-tls", "tls.amqp", "AMQP over TLS listen address (amqps; needs --tls-cert)", func(c *Config) *string { return &c.TLS.AMQP }),
	stringOpt("ws-tls", "tls.websocket", "WebSockets over TLS listen address (wss; needs --tls-cert)", func(c *Config) *string { return &c.TLS.WebSocket }),
	boolOpt("notifications", "notifications.enabled", "publish broker events as messages to the notification address", func(c *Config) *bool { return &c.Notifications.Enabled }),
	stringOpt("notifications-address", "notifications.address", "multicast address broker events are published to", func(c *Config) *string { return &c.Notifications.Address }),
	boolOpt("notifications-advisory", "notifications.advisory", "also publish each event to its ActiveMQ advisory topic (ActiveMQ.Advisory.*)", func(c *Config) *bool { return &c.Notifications.Advisory }),
	intOpt("notifications-buffer", "notifications.buffer", "events waiting to be published; past it they are dropped and counted", func(c *Config) *int { return &c.Notifications.Buffer }),
	boolOpt("virtual-topics", "virtual-topics", "ActiveMQ virtual topics: a send to VirtualTopic.X is also copied to every queue Consumer.NAME.VirtualTopic.X", func(c *Config) *bool { return &c.VirtualTopics }),
	boolOpt("persistence", "persistence.enabled", "keep durable messages in the journal (false: memory only)", func(c *Config) *bool { return &c.Persistence.Enabled }),
	sizeOpt("journal-file-size", "persistence.journal-file-size", "size of each journal file", func(c *Config) *ByteSize { return &c.Persistence.FileSize }),
	intOpt("journal-pool-files", "persistence.journal-pool-files", "empty journal files kept for reuse", func(c *Config) *int { return &c.Persistence.PoolFiles }),
	floatOpt("journal-compact-ratio", "persistence.compact-min-ratio", "compact when live data falls below this share of the journal (negative disables)", func(c *Config) *float64 { return &c.Persistence.CompactMinRatio }),
	sizeOpt("max-memory", "max-memory", "memory budget for messages held in memory; past it each address applies its address-full-policy (0: a quarter of the machine's memory)", func(c *Config) *ByteSize { return &c.MaxMemory }),
	sizeOpt("page-segment-size", "persistence.page-segment-size", "size of each page file of a queue paging to disk", func(c *Config) *ByteSize { return &c.Persistence.PageSegmentSize }),
	sizeOpt("max-disk-usage", "persistence.max-disk-usage", "bound on journals and page stores together; past it durable sends are refused (0: none)", func(c *Config) *ByteSize { return &c.Persistence.MaxDiskUsage }),
	sizeOpt("min-free-disk", "persistence.min-free-disk", "free disk space to keep; below it durable sends are refused (0: none)", func(c *Config) *ByteSize { return &c.Persistence.MinFreeDisk }),
	sizeOpt("large-message-threshold", "persistence.large-message-threshold", "durable bodies above this size are stored in files of their own", func(c *Config) *ByteSize { return &c.Persistence.LargeMessageThreshold }),
	stringOpt("users", "users", "YAML users file (bcrypt hashes and roles; see junction user); reread when it changes", func(c *Config) *string { return &c.Users }),
	triBoolOpt("allow-anonymous", "allow-anonymous", "accept clients without credentials (default: only while every listener is on loopback)", func(c *Config) **bool { return &c.AllowAnonymous }),
	stringOpt("ha", "ha", "high availability: off, or shared-store (brokers on one data directory: the one holding its lock is live, the others wait as backups)", func(c *Config) *string { return &c.HA }),
	durationOpt("ha-lock-poll", "ha-lock-poll", "how often a backup tries the store lock", func(c *Config) *time.Duration { return &c.HALockPoll }),
	durationOpt("ha-check-interval", "ha-check-interval", "how often the live broker proves it still holds the store", func(c *Config) *time.Duration { return &c.HACheckInterval }),
	durationOpt("ha-check-timeout", "ha-check-timeout", "how long one such check may take before the live broker stops (keep interval + timeout far below an NFS lease)", func(c *Config) *time.Duration { return &c.HACheckTimeout }),
	durationOpt("config-watch-interval", "config-watch-interval", "how often the --config file is checked for a change, which reloads what can change live (0 disables; SIGHUP and junction config reload always work)", func(c *Config) *time.Duration { return &c.ConfigWatchInterval }),
	stringOpt("journal-recovery", "persistence.recovery", "on damage in the middle of the journal: strict (refuse to start) or salvage", func(c *Config) *string { return &c.Persistence.Recovery }),
}, clusterOptions...)

func envName(flag string) string {
	return "JUNCTION_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// loadConfig builds the configuration from defaults, the --config file,
// the environment and the flags in args.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("junction serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "\nflags of junction [serve] (each also an environment variable, and a key of the --config file):")
		fs.PrintDefaults()
	}
	configFile := fs.String("config", getenv("JUNCTION_CONFIG"), "YAML configuration file")
	values := make(map[string]*string, len(options))
	def := defaultConfig()
	for _, o := range options {
		if bareFlags[o.flag] {
			v := o.get(&def)
			values[o.flag] = &v
			fs.Var(&optionFlag{v: &v, bare: true}, o.flag, o.usage+" (env "+envName(o.flag)+")")
			continue
		}
		values[o.flag] = fs.String(o.flag, o.get(&def), o.usage+" (env "+envName(o.flag)+")")
	}
	if err := parseFlags(fs, args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, usagef("unexpected argument %q", fs.Arg(0))
	}
	cfg := defaultConfig()
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			return Config{}, err
		}
		c, errs := parseConfig(data)
		if len(errs) > 0 {
			return Config{}, fmt.Errorf("%s: %w", *configFile, errors.Join(errs...))
		}
		cfg = c
	}
	for _, o := range options {
		if v := getenv(envName(o.flag)); v != "" {
			if err := o.set(&cfg, v); err != nil {
				return Config{}, fmt.Errorf("%s: %w", envName(o.flag), err)
			}
		}
	}
	var ferr error
	fs.Visit(func(f *flag.Flag) {
		for _, o := range options {
			if o.flag == f.Name && ferr == nil {
				if err := o.set(&cfg, *values[o.flag]); err != nil {
					ferr = usagef("--%s: %w", o.flag, err)
				}
			}
		}
	})
	if ferr != nil {
		return Config{}, ferr
	}
	if errs := cfg.validate(); len(errs) > 0 {
		// A value given as a flag that makes no sense is the command
		// line's error (exit status 2); one from the file or the
		// environment is not.
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) {
			for _, o := range options {
				if o.flag == f.Name {
					given[o.path] = true
				}
			}
		})
		var list []error
		fromFlag := false
		for _, e := range errs {
			list = append(list, e)
			fromFlag = fromFlag || given[e.path]
		}
		if fromFlag {
			return Config{}, usageError{errors.Join(list...)}
		}
		return Config{}, errors.Join(list...)
	}
	cfg.source = &configSource{args: args, getenv: getenv, file: *configFile}
	return cfg, nil
}

// fieldError is a semantic error in one configuration value.
type fieldError struct {
	path string
	msg  string
}

func (e fieldError) Error() string { return e.path + ": " + e.msg }

// validate checks values that parse but make no sense.
func (c *Config) validate() []fieldError {
	var errs []fieldError
	bad := func(path, format string, args ...any) {
		errs = append(errs, fieldError{path, fmt.Sprintf(format, args...)})
	}
	if c.DataDir == "" {
		bad("data-dir", "must not be empty")
	}
	switch c.LogLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log-level", "must be one of trace, debug, info, warn, error; got %q", c.LogLevel)
	}
	if c.LogFormat != "console" && c.LogFormat != "json" {
		bad("log-format", "must be console or json; got %q", c.LogFormat)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "must be positive")
	}
	if c.MaxConnections < 0 {
		bad("max-connections", "must be >= 0")
	}
	c.Limits.validate(bad)
	if c.Stomp.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Stomp.Listen); err != nil {
			bad("stomp.listen", "not a host:port address: %v", err)
		}
	}
	if c.Stomp.MaxFrameSize < 1024 {
		bad("stomp.max-frame-size", "must be at least 1KiB")
	}
	if c.Stomp.MaxMessageSize < c.Stomp.MaxFrameSize {
		bad("stomp.max-message-size", "must be at least max-frame-size")
	}
	if c.Stomp.MaxHeaders < 1 {
		bad("stomp.max-headers", "must be at least 1")
	}
	if c.Stomp.MaxHeaderLength < 64 || c.Stomp.MaxHeaderLength > c.Stomp.MaxFrameSize {
		bad("stomp.max-header-length", "must be between 64 bytes and max-frame-size")
	}
	if c.Stomp.HeartBeatMin < 0 {
		bad("stomp.heart-beat-min", "must be >= 0")
	}
	if c.Stomp.Prefetch < 1 {
		bad("stomp.prefetch", "must be at least 1")
	}
	if c.MQTT.Listen != "" {
		if _, _, err := net.SplitHostPort(c.MQTT.Listen); err != nil {
			bad("mqtt.listen", "not a host:port address: %v", err)
		}
	}
	if c.AMQP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.AMQP.Listen); err != nil {
			bad("amqp.listen", "not a host:port address: %v", err)
		}
	}
	if c.AMQP.MaxFrameSize < 512 || c.AMQP.MaxFrameSize > 64<<20 {
		bad("amqp.max-frame-size", "must be between 512 bytes (AMQP's minimum) and 64MiB")
	}
	if c.AMQP.MaxMessageSize < c.AMQP.MaxFrameSize {
		bad("amqp.max-message-size", "must be at least max-frame-size")
	}
	if c.AMQP.MaxLargeMessageSize < c.AMQP.MaxFrameSize || c.AMQP.MaxLargeMessageSize > 4<<30-1 {
		bad("amqp.max-large-message-size", "must be between max-frame-size and 4GiB less a byte (a data section's limit)")
	}
	if c.AMQP.IdleTimeout < 0 {
		bad("amqp.idle-timeout", "must be >= 0")
	}
	if c.AMQP.LinkCredit < 1 || c.AMQP.LinkCredit > 1<<20 {
		bad("amqp.link-credit", "must be between 1 and 1048576")
	}
	for path, addr := range map[string]string{
		"websocket.listen": c.WebSocket.Listen, "all.listen": c.All.Listen, "console.listen": c.Console.Listen,
		"tls.stomp": c.TLS.Stomp, "tls.mqtt": c.TLS.MQTT, "tls.amqp": c.TLS.AMQP, "tls.websocket": c.TLS.WebSocket,
	} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(path, "not a host:port address: %v", err)
		}
		if strings.HasPrefix(path, "tls.") && !c.TLS.enabled() {
			bad(path, "a TLS listener needs tls.cert and tls.key")
		}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		bad("tls.cert", "tls.cert and tls.key go together")
	}
	if (c.TLS.ClientCA != "" || c.TLS.RequireClientCert) && !c.TLS.enabled() {
		bad("tls.client-ca", "client certificates need tls.cert and tls.key")
	}
	if c.TLS.RequireClientCert && c.TLS.ClientCA == "" {
		bad("tls.require-client-cert", "needs tls.client-ca to verify them against")
	}
	if c.TLS.HandshakeTimeout <= 0 {
		bad("tls.handshake-timeout", "must be > 0")
	}
	if c.All.DetectTimeout <= 0 {
		bad("all.detect-timeout", "must be > 0")
	}
	for path, hosts := range map[string]string{"console.allowed-hosts": c.Console.AllowedHosts, "websocket.allowed-hosts": c.WebSocket.AllowedHosts} {
		if _, err := hostlist.New(commaList(hosts)...); err != nil {
			bad(path, "%v (want comma-separated host names, IP addresses or host:port, or *)", err)
		}
	}
	if c.WebSocket.MaxMessageSize < 1024 {
		bad("websocket.max-message-size", "must be at least 1KiB")
	}
	if c.MQTT.MaxMessageSize < c.MQTT.MaxPacketSize || c.MQTT.MaxMessageSize > 256<<20+5 {
		bad("mqtt.max-message-size", "must be between max-packet-size and 256MiB")
	}
	if c.MQTT.MaxPacketSize < 1024 || c.MQTT.MaxPacketSize > 256<<20 {
		bad("mqtt.max-packet-size", "must be between 1KiB and 256MiB (MQTT's limit)")
	}
	if c.MQTT.SessionExpiry < time.Second {
		bad("mqtt.max-session-expiry", "must be at least 1s")
	}
	if c.MQTT.MaxSessionBytes < 1024 {
		bad("mqtt.max-session-bytes", "must be at least 1KiB")
	}
	if c.MQTT.ReceiveMaximum < 1 || c.MQTT.ReceiveMaximum > 65535 {
		bad("mqtt.receive-maximum", "must be between 1 and 65535")
	}
	p := &c.Persistence
	if p.FileSize < 64<<10 {
		bad("persistence.journal-file-size", "must be at least 64KiB")
	}
	if p.MinFiles < 1 {
		bad("persistence.journal-min-files", "must be at least 1")
	}
	if p.PoolFiles < p.MinFiles {
		bad("persistence.journal-pool-files", "must be at least journal-min-files")
	}
	if p.CompactMinRatio >= 1 {
		bad("persistence.compact-min-ratio", "must be below 1 (negative disables compaction)")
	}
	if p.CompactMinFiles < 1 {
		bad("persistence.compact-min-files", "must be at least 1")
	}
	if p.LargeMessageThreshold < 1024 {
		bad("persistence.large-message-threshold", "must be at least 1KiB")
	}
	if p.PageSegmentSize < 64<<10 {
		bad("persistence.page-segment-size", "must be at least 64KiB")
	}
	if p.Recovery != "strict" && p.Recovery != "salvage" {
		bad("persistence.recovery", "must be strict or salvage; got %q", p.Recovery)
	}
	for i := range c.AddressSettings {
		if err := c.AddressSettings[i].Validate(); err != nil {
			bad(fmt.Sprintf("address-settings.%d", i), "%v", err)
		}
	}
	if c.Notifications.Enabled {
		if err := validAddressName(c.Notifications.Address); err != nil {
			bad("notifications.address", "%v", err)
		}
	}
	if c.Notifications.Buffer < 1 {
		bad("notifications.buffer", "must be at least 1")
	}
	names := map[string]bool{}
	for i := range c.Diverts {
		if err := c.Diverts[i].Validate(); err != nil {
			bad(fmt.Sprintf("diverts.%d", i), "%v", err)
		} else if names[c.Diverts[i].Name] {
			bad(fmt.Sprintf("diverts.%d", i), "divert name %q is used twice", c.Diverts[i].Name)
		}
		names[c.Diverts[i].Name] = true
	}
	switch c.HA {
	case "off":
	case haSharedStore:
		if !c.Persistence.Enabled {
			bad("ha", "shared-store needs persistence: the store is what the brokers share")
		}
		if c.Cluster.enabled() {
			bad("ha", "shared-store and cluster exclude each other: a cluster replicates its store instead of sharing one")
		}
	default:
		bad("ha", "must be off or shared-store; got %q", c.HA)
	}
	if c.HALockPoll < 10*time.Millisecond {
		bad("ha-lock-poll", "must be at least 10ms")
	}
	if c.HACheckInterval <= 0 {
		bad("ha-check-interval", "must be positive")
	}
	if c.HACheckTimeout <= 0 {
		bad("ha-check-timeout", "must be positive")
	}
	if c.ConfigWatchInterval < 0 {
		bad("config-watch-interval", "must be >= 0 (0 disables the watch)")
	}
	c.validateSecurity(bad)
	c.Cluster.validate(bad)
	return errs
}

// validAddressName refuses empty names and wildcard patterns.
func validAddressName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsAny(name, "*#>") {
		return fmt.Errorf("%q is a wildcard pattern, not an address", name)
	}
	return nil
}

// parseConfig decodes a YAML configuration over the defaults and returns
// every error found, each with its line.
func parseConfig(data []byte) (Config, []error) {
	cfg := defaultConfig()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return cfg, []error{err}
	}
	var errs []error
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				errs = append(errs, errors.New(yamlWords(e)))
			}
		} else {
			errs = append(errs, err)
		}
	}
	if hb := cfg.Stomp.HeartBeat; hb != nil {
		cfg.Stomp.HeartBeatMin, cfg.Stomp.HeartBeat = *hb, nil
	}
	for _, fe := range cfg.validate() {
		if line := lineOf(&root, fe.path); line > 0 {
			errs = append(errs, fmt.Errorf("line %d: %s", line, fe))
		} else {
			errs = append(errs, fe)
		}
	}
	// By line, as an editor shows them; those without one last.
	slices.SortStableFunc(errs, func(a, b error) int { return lineNumber(a) - lineNumber(b) })
	return cfg, errs
}

var (
	yamlUnknownField = regexp.MustCompile(`^(line \d+: field \S+ not found) in type \S+$`)
	yamlIntoGoType   = regexp.MustCompile(` into (\[\]|map\[)?[\w.\[\]*]*\.[A-Z]\w*$`)
)

// yamlWords rewords yaml's type errors without Go's type names, which
// mean nothing to whoever edits the file: "field colour not found in type
// main.Config" and "cannot unmarshal !!map into []core.AddressSettings".
func yamlWords(e string) string {
	if m := yamlUnknownField.FindStringSubmatch(e); m != nil {
		return m[1] + ": no such option (junction config defaults lists them)"
	}
	if m := yamlIntoGoType.FindStringSubmatchIndex(e); m != nil {
		what := "a mapping of options"
		if m[2] >= 0 && e[m[2]:m[3]] == "[]" {
			what = "a list (- entries)"
		}
		return e[:m[0]] + " into " + what
	}
	return e
}

// lineNumber is the N of an error reading "line N: ...", else a number
// past every line.
func lineNumber(err error) int {
	var n int
	if _, e := fmt.Sscanf(err.Error(), "line %d:", &n); e != nil {
		return math.MaxInt32
	}
	return n
}

// lineOf finds the line of a dotted path ("stomp.listen",
// "address-settings.2") in a YAML document; 0 when absent.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, part := range strings.Split(path, ".") {
		switch n.Kind {
		case yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					line, n, found = n.Content[i].Line, n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		case yaml.SequenceNode:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line
		}
	}
	return line
}
