package scenario

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// common holds the options every subcommand shares; each subcommand's
// config embeds it.
type common struct {
	addr        string // as given
	dialAddr    string // resolved loopback ip:port
	scenario    string
	size        int
	duration    time.Duration
	warmup      time.Duration
	drain       time.Duration
	pid         int
	runs        int
	json        bool
	dialTimeout time.Duration
}

// commonSpec is what a subcommand says differently about the shared
// options: its name (also the protocol), the default -addr, its scenarios
// (the first is the default) and the help texts that depend on it.
type commonSpec struct {
	name      string
	addr      string
	scenarios []string

	sizeHelp, durationHelp, warmupHelp, drainHelp, pidHelp, dialTimeoutHelp string
}

// registerFlags defines the shared flags on fs.
func (c *common) registerFlags(fs *flag.FlagSet, s *commonSpec) {
	fs.StringVar(&c.addr, "addr", s.addr, "broker "+strings.ToUpper(s.name)+" `host:port` (loopback only)")
	fs.StringVar(&c.scenario, "scenario", s.scenarios[0], "one of "+strings.Join(s.scenarios, ", "))
	fs.IntVar(&c.size, "size", 1024, s.sizeHelp)
	fs.DurationVar(&c.duration, "duration", 10*time.Second, s.durationHelp)
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, s.warmupHelp)
	fs.DurationVar(&c.drain, "drain", 10*time.Second, s.drainHelp)
	fs.IntVar(&c.pid, "pid", 0, s.pidHelp)
	fs.IntVar(&c.runs, "runs", 1, "repetitions; with more than one, a median line follows")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per line instead of text")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second, s.dialTimeoutHelp)
}

// validateCommon checks the ranges of the shared options.
func (c *common) validateCommon(scenarios []string) error {
	if !slices.Contains(scenarios, c.scenario) {
		return fmt.Errorf("unknown -scenario %q (want one of %s)", c.scenario, strings.Join(scenarios, ", "))
	}
	if c.size < minBodySize || c.size > maxBodySize {
		return fmt.Errorf("-size %d out of range [%d, %d]", c.size, minBodySize, maxBodySize)
	}
	if c.duration <= 0 || c.duration > time.Hour {
		return fmt.Errorf("-duration %v out of range (0, 1h]", c.duration)
	}
	if c.warmup < 0 || c.warmup > 10*time.Minute {
		return fmt.Errorf("-warmup %v out of range [0, 10m]", c.warmup)
	}
	if c.drain < 0 || c.drain > 10*time.Minute {
		return fmt.Errorf("-drain %v out of range [0, 10m]", c.drain)
	}
	if c.dialTimeout <= 0 || c.dialTimeout > time.Minute {
		return fmt.Errorf("-dial-timeout %v out of range (0, 1m]", c.dialTimeout)
	}
	if c.runs < 1 || c.runs > 100 {
		return fmt.Errorf("-runs %d out of range [1, 100]", c.runs)
	}
	if c.pid < 0 {
		return fmt.Errorf("-pid %d is negative", c.pid)
	}
	return nil
}

// resolveAddr sets dialAddr to the loopback address -addr resolves to,
// within the dial timeout.
func (c *common) resolveAddr() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.dialTimeout)
	defer cancel()
	da, err := loopbackAddr(ctx, c.addr)
	if err != nil {
		return err
	}
	c.dialAddr = da
	return nil
}

// parseCommand parses the flags of subcommand s into c (the shared
// options) and whatever register defines, then runs validate (which fills
// scenario defaults and checks everything, the shared options included)
// and resolves -addr.
func parseCommand(s *commonSpec, c *common, args []string, stderr io.Writer, register func(*flag.FlagSet), validate func() error) error {
	fs := flag.NewFlagSet("junction bench "+s.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.registerFlags(fs, s)
	register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: junction bench %s -addr %s -scenario S [flags]\n\nscenarios: %s\n\nflags:\n", s.name, s.addr, strings.Join(s.scenarios, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		fs.Usage()
		return ErrUsage
	}
	if err := validate(); err != nil {
		return usageErr{err}
	}
	return c.resolveAddr()
}

// runRepeated runs c.runs repetitions of once, printing a line for each
// and then, with more than one, a line with the medians. what names the
// run in errors.
//
// A signal (ctx ending) during a measured window ends it there: that
// run's line is printed, marked interrupted, with what was measured so
// far, and runRepeated returns ctx's error without the median line.
func runRepeated[R interface {
	write(io.Writer, bool) error
	setInterrupted()
}](ctx context.Context, c *common, what string, once func(ctx context.Context, run string) (R, error), median func([]R) R, stdout io.Writer) error {
	if c.pid > 0 {
		if _, err := procCPU(c.pid); err != nil {
			return fmt.Errorf("-pid %d: %w", c.pid, err)
		}
	}
	var results []R
	for i := 1; i <= c.runs; i++ {
		if i > 1 {
			select {
			case <-time.After(runPause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r, err := once(ctx, strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("%s run %d: %w", what, i, err)
		}
		interrupted := ctx.Err() != nil
		if interrupted {
			r.setInterrupted()
		}
		if err := r.write(stdout, c.json); err != nil {
			return err
		}
		if interrupted {
			return fmt.Errorf("%s run %d: interrupted: %w", what, i, context.Cause(ctx))
		}
		results = append(results, r)
	}
	if len(results) > 1 {
		return median(results).write(stdout, c.json)
	}
	return nil
}

// runState is the control of one run that the STOMP and MQTT benches
// share: stopping the load, the measured window, teardown and the first
// fatal error. Call init before use.
type runState struct {
	stop      chan struct{} // closed when producers, publishers and workers must stop
	stopped   atomic.Bool   // same, cheap to poll per message
	measuring atomic.Bool   // inside the measured window: record latencies
	tearing   atomic.Bool   // teardown began: errors from here on are expected

	failOnce sync.Once
	failErr  error         // first fatal error; read after failed is closed
	failed   chan struct{} // closed by fail
}

func (s *runState) init() {
	s.stop = make(chan struct{})
	s.failed = make(chan struct{})
}

// fail records the run's first fatal error; errors during teardown are
// expected and ignored.
func (s *runState) fail(err error) {
	if s.tearing.Load() {
		return
	}
	s.failOnce.Do(func() {
		s.failErr = err
		close(s.failed)
	})
}

// sleep waits d, or until the run fails or ctx ends.
func (s *runState) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.failed:
		return s.failErr
	}
}

// window waits out a measured window of d. A signal (ctx ending) ends
// the window early rather than the run: the caller goes on to its
// figures (runRepeated marks them interrupted); drainUntil then does not
// wait.
func (s *runState) window(ctx context.Context, d time.Duration) error {
	err := s.sleep(ctx, d)
	if err != nil && ctx.Err() != nil {
		select {
		case <-s.failed:
			return s.failErr
		default:
			return nil
		}
	}
	return err
}

// stopLoad tells the load to stop; safe to call twice.
func (s *runState) stopLoad() {
	if !s.stopped.Swap(true) {
		close(s.stop)
	}
}

// drainUntil polls until done reports true or deadline passes, then
// returns the run's fatal error, if any.
func (s *runState) drainUntil(ctx context.Context, deadline time.Time, done func() bool) error {
	for !done() && !time.Now().After(deadline) && ctx.Err() == nil {
		if err := s.sleep(ctx, pollInterval); err != nil && ctx.Err() == nil {
			return err
		}
	}
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}
