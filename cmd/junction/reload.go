package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/junctionmq/junction/transports"
)

// Live configuration. SIGHUP, a change of the --config file (polled
// every config-watch-interval) and `junction config reload` (POST
// /api/v1/config/reload) read the configuration again, from the same
// file, environment and flags as at the start, and put in force what a
// running broker can change without dropping a connection:
//
//	log-level
//	address-settings
//	security-settings, anonymous-roles (when the broker started with users or security settings)
//	max-connections, limits.max-connections-per-ip, limits.connection-rate-per-ip,
//	limits.connection-burst-per-ip, limits.max-auto-created-queues-per-user
//	diverts, virtual-topics
//
// Every other change is reported by its name as needing a restart, and
// left out of what is in force. An invalid file changes nothing. The
// users file is watched on its own (security.Reloader), and SIGHUP also
// reloads the TLS certificate.

// reloadable lists the configuration paths a reload applies (a path
// and everything under it).
var reloadable = []string{
	"log-level", "address-settings", "security-settings", "anonymous-roles",
	"max-connections", "limits.max-connections-per-ip", "limits.connection-rate-per-ip",
	"limits.connection-burst-per-ip", "limits.max-auto-created-queues-per-user",
	"diverts", "virtual-topics",
}

// configSource is where a configuration came from, to read it again.
type configSource struct {
	args   []string
	getenv func(string) string
	file   string // the --config file; "" without one
}

// ReloadResult is what one reload did.
type ReloadResult struct {
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"` // SIGHUP, file, api
	// Applied are the changed settings put in force.
	Applied []string `json:"applied"`
	// RestartRequired are the changed settings that take a restart; the
	// old values stay in force.
	RestartRequired []string `json:"restartRequired"`
	// Error says why nothing changed (an unreadable or invalid file).
	Error string `json:"error,omitempty"`
	// File is the configuration file read again; empty when the broker
	// was started without one, and Note then says so.
	File string `json:"file,omitempty"`
	Note string `json:"note,omitempty"`
}

// noConfigFile is a reload's Note when the broker has no configuration
// file: its flags and environment are those it started with.
const noConfigFile = "no configuration file to read: the broker was started without --config ($JUNCTION_CONFIG), " +
	"and its flags and environment cannot change while it runs; restart it with --config FILE to change settings live"

// liveConfig is the configuration in force and what reloads it.
type liveConfig struct {
	in    *instance
	level *levelFilter

	mu      sync.Mutex // serializes reloads
	cur     Config     // in force; guarded by mu
	started time.Time
	last    *ReloadResult  // guarded by mu
	recent  []ReloadResult // guarded by mu: the last few, newest last
}

// record keeps res as the last reload (mu held).
func (lc *liveConfig) record(res ReloadResult) {
	lc.last = &res
	if len(lc.recent) == 20 {
		lc.recent = slices.Delete(lc.recent, 0, 1)
	}
	lc.recent = append(lc.recent, res)
}

// levelFilter is the log writer whose level a reload changes: loggers
// are made at trace level and copied into every component, so the
// level is applied where the lines are written.
type levelFilter struct {
	w     io.Writer
	level atomic.Int32
}

func (f *levelFilter) Write(p []byte) (int, error) { return f.w.Write(p) }

// WriteLevel implements zerolog.LevelWriter.
func (f *levelFilter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if l < zerolog.Level(f.level.Load()) {
		return len(p), nil
	}
	return f.w.Write(p)
}

// Sample implements zerolog.Sampler: an event below the level is not
// made at all (Logger.Debug returns nil), so that the debug lines of
// every connection's open and close cost nothing at the usual levels.
func (f *levelFilter) Sample(l zerolog.Level) bool {
	return l >= zerolog.Level(f.level.Load())
}

// newLevelLogger is newLogger with a level a reload can change.
func newLevelLogger(cfg Config, w io.Writer) (zerolog.Logger, *levelFilter) {
	level, _ := zerolog.ParseLevel(cfg.LogLevel)
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !colourTerminal(w)}
	}
	f := &levelFilter{w: w}
	f.level.Store(int32(level))
	return zerolog.New(f).Level(zerolog.TraceLevel).Sample(f).With().Timestamp().Logger(), f
}

// inForce returns the configuration in force.
func (lc *liveConfig) inForce() Config {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.cur
}

// reload reads the configuration again and applies it.
func (lc *liveConfig) reload(trigger string) ReloadResult {
	res := ReloadResult{Time: time.Now(), Trigger: trigger, Applied: []string{}, RestartRequired: []string{}}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	src := lc.cur.source
	var next Config
	var err error
	if src == nil {
		err = errors.New("the broker was not started from a command line: nothing to read again")
	} else {
		next, err = loadConfig(src.args, src.getenv, io.Discard)
	}
	if err != nil {
		res.Error = err.Error()
		lc.in.log.Error().Str("trigger", trigger).Err(err).Msg("configuration not reloaded; keeping the one in force")
		lc.record(res)
		return res
	}
	if res.File = src.file; res.File == "" {
		res.Note = noConfigFile
		lc.in.log.Warn().Str("trigger", trigger).Msg("configuration reload: " + noConfigFile)
	}
	changed := diffConfig(lc.cur, next)
	applied := lc.cur
	for _, path := range changed {
		if !isReloadable(path) {
			res.RestartRequired = append(res.RestartRequired, path)
		}
	}
	apply := func(names ...string) bool {
		for _, n := range names {
			if slices.ContainsFunc(changed, func(p string) bool { return p == n || strings.HasPrefix(p, n+".") }) {
				return true
			}
		}
		return false
	}
	done := func(names ...string) {
		for _, p := range changed {
			for _, n := range names {
				if p == n || strings.HasPrefix(p, n+".") {
					res.Applied = append(res.Applied, p)
				}
			}
		}
	}
	refuse := func(why string, names ...string) {
		for _, p := range changed {
			for _, n := range names {
				if p == n || strings.HasPrefix(p, n+".") {
					res.RestartRequired = append(res.RestartRequired, p+" ("+why+")")
				}
			}
		}
	}
	b := lc.in.broker
	if next.Cluster.enabled() {
		// The access broker's address settings and virtual topics are
		// not its groups': those are set when a node starts. Its
		// diverts are its own (core applies them where a send enters
		// the cluster), and reload below as a single broker's do.
		refuse("a cluster node's groups keep theirs until a restart", "address-settings", "virtual-topics")
		changed = slices.DeleteFunc(changed, func(p string) bool {
			return p == "address-settings" || strings.HasPrefix(p, "address-settings.") || p == "virtual-topics"
		})
		next.VirtualTopics = lc.cur.VirtualTopics
	}
	if apply("log-level") {
		level, _ := zerolog.ParseLevel(next.LogLevel)
		lc.level.level.Store(int32(level))
		applied.LogLevel = next.LogLevel
		done("log-level")
	}
	if apply("address-settings") {
		if b == nil {
			refuse("no broker yet: a backup", "address-settings")
		} else if err := b.SetAddressSettings(next.AddressSettings); err != nil {
			refuse(err.Error(), "address-settings")
		} else {
			applied.AddressSettings = next.AddressSettings
			done("address-settings")
		}
	}
	if apply("security-settings", "anonymous-roles") {
		switch {
		case lc.in.sec == nil:
			refuse("no security store", "security-settings", "anonymous-roles")
		case !lc.in.sec.authorize && len(next.SecuritySettings) > 0:
			// core has no Authorizer to ask: it was started with
			// neither users nor security settings.
			refuse("started without users or security settings: permissions are not checked until a restart", "security-settings", "anonymous-roles")
		default:
			if err := lc.in.sec.store.SetSettings(next.SecuritySettings, next.AnonymousRoles); err != nil {
				refuse(err.Error(), "security-settings", "anonymous-roles")
				break
			}
			if b != nil {
				b.PermissionsChanged()
			}
			applied.SecuritySettings, applied.AnonymousRoles = next.SecuritySettings, next.AnonymousRoles
			done("security-settings", "anonymous-roles")
		}
	}
	if apply("max-connections", "limits.max-connections-per-ip", "limits.connection-rate-per-ip", "limits.connection-burst-per-ip") {
		l := transports.Limits{MaxConns: next.MaxConnections, MaxConnsPerIP: next.Limits.MaxConnectionsPerIP,
			ConnRatePerIP: next.Limits.ConnectionRatePerIP, ConnBurstPerIP: next.Limits.ConnectionBurstPerIP}
		lc.in.lmu.Lock()
		servers := slices.Clone(lc.in.servers)
		lc.in.limits.MaxConnectionsPerIP, lc.in.limits.ConnectionRatePerIP, lc.in.limits.ConnectionBurstPerIP =
			l.MaxConnsPerIP, l.ConnRatePerIP, l.ConnBurstPerIP
		lc.in.lmu.Unlock()
		for _, s := range servers {
			s.SetLimits(l)
		}
		applied.MaxConnections = next.MaxConnections
		applied.Limits.MaxConnectionsPerIP = next.Limits.MaxConnectionsPerIP
		applied.Limits.ConnectionRatePerIP = next.Limits.ConnectionRatePerIP
		applied.Limits.ConnectionBurstPerIP = next.Limits.ConnectionBurstPerIP
		done("max-connections", "limits.max-connections-per-ip", "limits.connection-rate-per-ip", "limits.connection-burst-per-ip")
	}
	if apply("limits.max-auto-created-queues-per-user") {
		if b == nil {
			refuse("no broker yet: a backup", "limits.max-auto-created-queues-per-user")
		} else {
			b.SetMaxAutoCreatedQueuesPerUser(next.Limits.MaxAutoCreatedQueues)
			applied.Limits.MaxAutoCreatedQueues = next.Limits.MaxAutoCreatedQueues
			done("limits.max-auto-created-queues-per-user")
		}
	}
	if apply("diverts", "virtual-topics") {
		if b == nil {
			refuse("no broker yet: a backup", "diverts", "virtual-topics")
		} else if err := b.ReloadDiverts(slices.Clone(next.Diverts), next.VirtualTopics); err != nil {
			refuse(err.Error(), "diverts", "virtual-topics")
		} else {
			if lc.in.cluster != nil {
				// Its peers compare its diverts no more (cluster/params.go).
				lc.in.cluster.SetDiverts(next.Diverts)
			}
			applied.Diverts, applied.VirtualTopics = next.Diverts, next.VirtualTopics
			done("diverts", "virtual-topics")
		}
	}
	sort.Strings(res.Applied)
	sort.Strings(res.RestartRequired)
	lc.cur = applied
	lc.record(res)
	ev := lc.in.log.Info()
	if len(res.RestartRequired) > 0 {
		ev = lc.in.log.Warn()
	}
	ev.Str("trigger", trigger).Strs("applied", res.Applied).Strs("restart_required", res.RestartRequired).
		Msg("configuration reloaded")
	return res
}

func isReloadable(path string) bool {
	for _, r := range reloadable {
		if path == r || strings.HasPrefix(path, r+".") {
			return true
		}
	}
	return false
}

// diffConfig returns the paths (as in the YAML file) whose values
// differ; a list counts as one value.
func diffConfig(a, b Config) []string {
	fa, fb := flatConfig(a), flatConfig(b)
	var out []string
	for k, v := range fa {
		if w, ok := fb[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// flatConfig maps each leaf path of c's YAML form to its value.
func flatConfig(c Config) map[string]string {
	out := map[string]string{}
	var m map[string]any
	data, _ := yaml.Marshal(c)
	yaml.Unmarshal(data, &m)
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if mm, ok := v.(map[string]any); ok {
			for k, x := range mm {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		j, _ := json.Marshal(v)
		out[prefix] = string(j)
	}
	walk("", m)
	return out
}

// configView is GET /api/v1/config: the settings in force.
type configView struct {
	File            string         `json:"file,omitempty"`
	Started         time.Time      `json:"started"`
	WatchInterval   string         `json:"watchInterval"`
	Reloadable      []string       `json:"reloadable"`
	Config          map[string]any `json:"config"`
	LastReload      *ReloadResult  `json:"lastReload,omitempty"`
	SecuritySetting any            `json:"securitySettingsInForce,omitempty"`
}

// view returns the settings in force, keyed as in the YAML file.
func (lc *liveConfig) view() any {
	lc.mu.Lock()
	cur, last := lc.cur, lc.last
	lc.mu.Unlock()
	var m map[string]any
	data, _ := yaml.Marshal(cur)
	yaml.Unmarshal(data, &m)
	v := configView{Started: lc.started, Config: jsonable(m).(map[string]any), LastReload: last,
		Reloadable: reloadable, WatchInterval: cur.ConfigWatchInterval.String()}
	if cur.source != nil {
		v.File = cur.source.file
	}
	return v
}

// jsonable turns YAML's map[any]any-free values into JSON-ready ones.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}

// apiReload is POST /api/v1/config/reload.
func (lc *liveConfig) apiReload() (any, error) {
	res := lc.reload("api")
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	return res, nil
}

// watch reloads when the --config file changes (its modification time
// or size), polling every interval, until done is closed. A change is
// read once the file has stayed the same for one more interval, so a
// file being written is not read half-way.
func (lc *liveConfig) watch(done <-chan struct{}, file string, interval time.Duration) {
	stamp := func() (time.Time, int64) {
		fi, err := os.Stat(file)
		if err != nil {
			return time.Time{}, -1
		}
		return fi.ModTime(), fi.Size()
	}
	mt, size := stamp()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			m, s := stamp()
			if s < 0 || (m.Equal(mt) && s == size) {
				continue
			}
			mt, size = m, s
			settled := false
			for !settled {
				select {
				case <-done:
					return
				case <-t.C:
				}
				m, s = stamp()
				settled = s >= 0 && m.Equal(mt) && s == size
				mt, size = m, s
			}
			lc.reload("file")
		}
	}
}

// runConfigReload is `junction config reload`: the running broker reads
// its configuration again (through its console's API) and says what it
// applied and what needs a restart.
func runConfigReload(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, af := newAdminFlags("config reload", getenv, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("usage: junction config reload [--console URL] [--json]")
	}
	var res ReloadResult
	err = af.call(ctx, http.MethodPost, "/config/reload", struct{}{}, &res)
	var ae *apiError
	if err != nil && !(errors.As(err, &ae) && ae.status == http.StatusBadRequest) {
		return err
	}
	if ae != nil {
		// An invalid file: the answer is {"error", "result"}.
		var answer struct {
			Result ReloadResult `json:"result"`
		}
		if json.Unmarshal(ae.body, &answer) == nil {
			res = answer.Result
		}
	}
	if af.json {
		if err := printJSON(stdout, res); err != nil {
			return err
		}
	} else if res.Error == "" && err == nil && res.File == "" && res.Note != "" {
		fmt.Fprintln(stdout, res.Note) // rather than "applied: (none)"
	} else if res.Error == "" && err == nil {
		fmt.Fprintf(stdout, "applied: %s\n", listOrNone(res.Applied))
		fmt.Fprintf(stdout, "restart required: %s\n", listOrNone(res.RestartRequired))
	}
	if err != nil {
		return fmt.Errorf("configuration not reloaded: %w", err)
	}
	return nil
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, ", ")
}
