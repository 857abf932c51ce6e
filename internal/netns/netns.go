//go:build linux

package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Errors.
var (
	// ErrUnavailable: this machine or process cannot build namespaces
	// (wrapped with the reason).
	ErrUnavailable = errors.New("netns: unavailable")
	// ErrNoNetem: the kernel has no netem qdisc, so Delay cannot work.
	ErrNoNetem = errors.New("netns: no netem qdisc in this kernel")
)

const (
	namePrefix = "jn"
	bridge     = "br0"
	nodeIf     = "eth0"
	runDir     = "/run/netns"
)

// staleName matches our namespaces' names: jn<pid>-<hex>-<role>.
var staleName = regexp.MustCompile(`^jn([0-9]+)-[0-9a-f]{8}-`)

// Firewall names a packet-filter tool.
type Firewall string

const (
	NFT      Firewall = "nft"
	IPTables Firewall = "iptables"
)

// Available reports why namespaces cannot be built here, or nil. fw is
// the firewall New would use.
func Available() (fw Firewall, err error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: not root", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "", fmt.Errorf("%w: no ip command (iproute2)", ErrUnavailable)
	}
	fws := Firewalls()
	if len(fws) == 0 {
		return "", fmt.Errorf("%w: neither nft nor iptables-restore", ErrUnavailable)
	}
	return fws[0], nil
}

// Firewalls lists the firewalls this machine has, preferred first.
func Firewalls() []Firewall {
	var fws []Firewall
	if _, err := exec.LookPath("nft"); err == nil {
		fws = append(fws, NFT)
	}
	if _, err := exec.LookPath("iptables-restore"); err == nil {
		fws = append(fws, IPTables)
	}
	return fws
}

// Net is a set of node namespaces on one bridge.
type Net struct {
	prefix string
	ids    []uint64
	fw     Firewall

	mu   sync.Mutex
	cuts map[[2]uint64]cut
}

type cut int

const (
	cutBoth   cut = iota + 1 // no packet between the two nodes
	cutOneWay                // no connection from the first to the second
)

// RequireEnv is the environment variable that makes namespaces a must:
// with RequireEnv=1, Setup and SkipUnavailable fail the test where they
// would skip it (CI, which runs as root, sets it so that a test of real
// partitions cannot pass by not running).
const RequireEnv = "JUNCTION_REQUIRE_NETNS"

// Required reports whether RequireEnv=1.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipUnavailable skips t when namespaces cannot be built here (err is
// Available's), or fails it when they are Required.
func SkipUnavailable(t testing.TB) {
	t.Helper()
	if _, err := Available(); err != nil {
		unavailable(t, err)
	}
}

// unavailable skips t with err, or fails it when namespaces are Required.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%v (%s=1: network namespaces are required)", err, RequireEnv)
		return
	}
	t.Skip(err)
}

// Setup builds a Net for nodes ids for test t, skipping t when this
// machine cannot (failing it instead when RequireEnv=1); Close runs at
// cleanup, also when t fails. fw chooses the firewall ("" for the
// preferred one).
func Setup(t testing.TB, fw Firewall, ids ...uint64) *Net {
	t.Helper()
	SkipUnavailable(t)
	n, err := New(fw, ids...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// New builds the namespaces for nodes ids (each in 1..250), after
// removing those that killed runs left. fw chooses the firewall ("" for
// the preferred one).
func New(fw Firewall, ids ...uint64) (*Net, error) {
	best, err := Available()
	if err != nil {
		return nil, err
	}
	if fw == "" {
		fw = best
	}
	if !slices.Contains(Firewalls(), fw) {
		return nil, fmt.Errorf("%w: no %s", ErrUnavailable, fw)
	}
	for _, id := range ids {
		if id < 1 || id > 250 {
			return nil, fmt.Errorf("netns: node id %d outside 1..250", id)
		}
	}
	if err := Sweep(); err != nil {
		return nil, err
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	n := &Net{
		prefix: fmt.Sprintf("%s%d-%s", namePrefix, os.Getpid(), hex.EncodeToString(r[:])),
		ids:    slices.Clone(ids),
		fw:     fw,
		cuts:   make(map[[2]uint64]cut),
	}
	if err := n.build(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) bridgeNS() string { return n.prefix + "-br" }

// Name returns node id's namespace name, for `ip netns exec`.
func (n *Net) Name(id uint64) string { return fmt.Sprintf("%s-n%d", n.prefix, id) }

// IP returns node id's address.
func (n *Net) IP(id uint64) string { return fmt.Sprintf("10.213.0.%d", id) }

// Addr returns node id's address with port.
func (n *Net) Addr(id uint64, port int) string {
	return net.JoinHostPort(n.IP(id), strconv.Itoa(port))
}

func (n *Net) build() error {
	br := n.bridgeNS()
	steps := [][]string{
		{"netns", "add", br},
		{"-n", br, "link", "add", bridge, "type", "bridge"},
		{"-n", br, "link", "set", bridge, "up"},
	}
	for _, id := range n.ids {
		ns, veth := n.Name(id), fmt.Sprintf("v%d", id)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", br, "link", "add", veth, "type", "veth", "peer", "name", nodeIf, "netns", ns},
			[]string{"-n", br, "link", "set", veth, "master", bridge, "up"},
			[]string{"-n", ns, "addr", "add", n.IP(id) + "/24", "dev", nodeIf},
			[]string{"-n", ns, "link", "set", nodeIf, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return err
		}
	}
	// The filters go in before any connection, so that conntrack tracks
	// every connection from its first packet (one-way cuts need its
	// direction).
	return n.apply()
}

// run runs a command, returning its output in the error.
func run(name string, args ...string) error {
	return runIn(nil, name, args...)
}

func runIn(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Command returns a command that runs name with args inside node id's
// namespace (through `ip netns exec`). The caller starts it and owns the
// process; Close kills processes still running in the namespaces.
func (n *Net) Command(id uint64, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name(id), name}, args...)...)
}

// Do runs f on an OS thread inside node id's namespace: sockets f creates
// belong to that namespace (and keep working from any goroutine after).
// f must not start goroutines that expect to be in the namespace.
func (n *Net) Do(id uint64, f func() error) error {
	target, err := os.Open(runDir + "/" + n.Name(id))
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: setns %s: %w", n.Name(id), err)
			return
		}
		ferr := f()
		// A thread that cannot go back stays locked: it ends with this
		// goroutine instead of serving others in the wrong namespace.
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// Listen listens on addr (host:port; the host empty or node id's IP)
// inside node id's namespace.
func (n *Net) Listen(id uint64, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(id, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// Dial connects from node id's namespace to addr within timeout.
func (n *Net) Dial(id uint64, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.DialFunc(id)(ctx, addr)
}

// DialFunc returns a function that connects from node id's namespace to
// addr (host:port), as the cluster transport's Config.Dial.
func (n *Net) DialFunc(id uint64) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := n.Do(id, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
}

// Partition cuts, both ways, every link between nodes of different
// groups; a node in no group is cut from all. It replaces the cuts in
// place.
func (n *Net) Partition(groups ...[]uint64) error {
	group := make(map[uint64]int)
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cuts)
	for _, a := range n.ids {
		for _, b := range n.ids {
			if a != b && (group[a] == 0 || group[a] != group[b]) {
				n.cuts[[2]uint64{a, b}] = cutBoth
			}
		}
	}
	return n.apply()
}

// Isolate cuts node id from all others, both ways.
func (n *Net) Isolate(id uint64) error {
	var rest []uint64
	for _, x := range n.ids {
		if x != id {
			rest = append(rest, x)
		}
	}
	return n.Partition([]uint64{id}, rest)
}

// OneWay stops node from's connections to node to (new ones time out,
// open ones stall) and leaves to's connections to from alone; other cuts
// stay.
func (n *Net) OneWay(from, to uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cuts[[2]uint64{from, to}] != cutBoth {
		n.cuts[[2]uint64{from, to}] = cutOneWay
	}
	return n.apply()
}

// Heal removes every cut.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cuts)
	return n.apply()
}

// apply writes every node's filter from n.cuts.
func (n *Net) apply() error {
	for _, id := range n.ids {
		var in, out []string // the peers whose packets are dropped, per hook
		var outConn []string // the peers our connections to are cut
		for _, peer := range n.ids {
			switch {
			case n.cuts[[2]uint64{id, peer}] == cutBoth || n.cuts[[2]uint64{peer, id}] == cutBoth:
				in = append(in, n.IP(peer))
				out = append(out, n.IP(peer))
			case n.cuts[[2]uint64{id, peer}] == cutOneWay:
				outConn = append(outConn, n.IP(peer))
			}
		}
		var err error
		switch n.fw {
		case NFT:
			err = runIn([]byte(nftRules(in, out, outConn)), "ip", "netns", "exec", n.Name(id), "nft", "-f", "-")
		case IPTables:
			err = runIn([]byte(iptablesRules(in, out, outConn)), "ip", "netns", "exec", n.Name(id), "iptables-restore")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

const nftTable = "junction_netns"

// nftRules replaces our table in one transaction (adding it first, so
// the delete always has something to delete).
func nftRules(in, out, outConn []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", nftTable, nftTable, nftTable)
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n")
	for _, ip := range in {
		fmt.Fprintf(&b, "\t\tip saddr %s drop\n", ip)
	}
	b.WriteString("\t}\n\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n")
	for _, ip := range out {
		fmt.Fprintf(&b, "\t\tip daddr %s drop\n", ip)
	}
	for _, ip := range outConn {
		fmt.Fprintf(&b, "\t\tip daddr %s ct direction original drop\n", ip)
	}
	// Keeps conntrack on in the namespace from the start.
	b.WriteString("\t\tct state new counter\n\t}\n}\n")
	return b.String()
}

// iptablesRules replaces the filter table (ours alone in the namespace).
func iptablesRules(in, out, outConn []string) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, ip := range in {
		fmt.Fprintf(&b, "-A INPUT -s %s/32 -j DROP\n", ip)
	}
	for _, ip := range out {
		fmt.Fprintf(&b, "-A OUTPUT -d %s/32 -j DROP\n", ip)
	}
	for _, ip := range outConn {
		fmt.Fprintf(&b, "-A OUTPUT -d %s/32 -m conntrack --ctdir ORIGINAL -j DROP\n", ip)
	}
	// Last, so a no-op: keeps conntrack on in the namespace from the start.
	b.WriteString("-A OUTPUT -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n")
	return b.String()
}

// Delay adds d to every packet node id sends (tc netem on its
// interface); 0 removes it. It returns ErrNoNetem when the kernel lacks
// netem.
func (n *Net) Delay(id uint64, d time.Duration) error {
	ns := n.Name(id)
	if d == 0 {
		err := run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", nodeIf, "root")
		if err != nil && strings.Contains(err.Error(), "No such file") {
			return nil // no delay to remove
		}
		return err
	}
	err := run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", nodeIf, "root", "netem", "delay", fmt.Sprintf("%dus", d.Microseconds()))
	if err != nil && strings.Contains(err.Error(), "qdisc kind is unknown") {
		return fmt.Errorf("%w: %v", ErrNoNetem, err)
	}
	return err
}

// Close kills the processes still running in the namespaces and removes
// the namespaces, with their interfaces. It is idempotent.
func (n *Net) Close() error {
	var errs []error
	names := []string{n.bridgeNS()}
	for _, id := range n.ids {
		names = append(names, n.Name(id))
	}
	for _, name := range names {
		if _, err := os.Stat(runDir + "/" + name); err != nil {
			continue
		}
		killIn(name)
		if err := run("ip", "netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killIn kills the processes in namespace name (started through
// Command) and waits a moment for them to go, so the namespace and its
// interfaces go with its name.
func killIn(name string) {
	pids := func() []int {
		out, _ := exec.Command("ip", "netns", "pids", name).Output()
		var ps []int
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
				ps = append(ps, p)
			}
		}
		return ps
	}
	ps := pids()
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(ps) > 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		ps = pids()
	}
}

// Sweep removes the namespaces of runs whose process no longer exists.
func Sweep() error {
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	var errs []error
	for _, e := range entries {
		m := staleName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || processExists(pid) {
			continue
		}
		if err := run("ip", "netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
