// Command junction runs the Junction message broker.
//
//	junction [serve] [flags]        start the broker (the default command)
//	junction config validate FILE   check a configuration file
//	junction config reload          make the running broker read its configuration again
//	junction cert dev [flags]       write a self-signed CA and certificates for local TLS
//	junction config defaults        print every option with its default (testdata/config/full.yaml)
//	junction user add|passwd|roles|rm|ls --file FILE ...  manage the users file
//	junction version                print the version
//	junction queue ls|stat|create|delete|purge|browse|move ...
//	junction conn ls|close ...
//	junction cluster status|add|remove ...
//	junction send --to DEST, junction receive --from DEST
//
// With no flags and no configuration file the broker starts with
// embedded defaults: data in ./data, STOMP on 127.0.0.1:61613, MQTT on
// 127.0.0.1:1883, AMQP on 127.0.0.1:5672, WebSockets on 127.0.0.1:61614
// and every protocol on 127.0.0.1:61616.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/junctionmq/junction/internal/bench/scenario"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // help: the usage is printed
		fmt.Fprintln(os.Stderr, "junction:", err)
	}
	os.Exit(exitCode(err))
}

// The exit statuses of junction, for scripts (listed in usage and in
// README.md). exitCode is the one place that decides them.
const (
	exitOK      = 0 // success, and a help request (-h, --help, help)
	exitFailure = 1 // the command ran and failed: broker unreachable, an error answered by the API or a protocol, a timeout, an invalid file
	exitUsage   = 2 // the command line is wrong: unknown command or flag, a missing or extra argument, a bad flag value
)

// exitCode is the exit status for run's error.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)), errors.Is(err, scenario.ErrUsage):
		return exitUsage
	}
	return exitFailure
}

// usageError is a wrong command line (exit status 2); any other error
// of run is a failure (1).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef is a usageError with a message.
func usagef(format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...)}
}

// parseFlags parses a command's flags; an error other than a help
// request is the command line's.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return usageError{err}
	}
	return err
}

// run is main without the process: tests call it with their own
// context, arguments and environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	if cmd == "config" && len(args) == 1 && args[0] == "defaults" {
		return writeDefaults(stdout) // the other config commands are below
	}
	switch cmd {
	case "serve":
		cfg, err := loadConfig(args, getenv, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stderr, nil)
	case "version":
		fmt.Fprintln(stdout, "junction", version)
		return nil
	case "config":
		if len(args) == 1 && isHelp(args[0]) {
			fmt.Fprintln(stdout, configUsage)
			return nil
		}
		if len(args) >= 1 && args[0] == "reload" {
			return runConfigReload(ctx, args[1:], getenv, stdout, stderr)
		}
		if len(args) != 2 || args[0] != "validate" {
			return usagef("%s", configUsage)
		}
		return validateFile(args[1], stdout)
	case "queue":
		return runQueue(ctx, args, getenv, stdout, stderr)
	case "conn":
		return runConn(ctx, args, getenv, stdout, stderr)
	case "cluster":
		return runCluster(ctx, args, getenv, stdout, stderr)
	case "send":
		return runSend(args, getenv, os.Stdin, stdout, stderr)
	case "receive":
		return runReceive(args, getenv, stdout, stderr)
	case "cert":
		return runCert(args, stdout, stderr)
	case "user":
		return runUser(args, getenv, os.Stdin, stdout, stderr)
	case "bench":
		return runBench(ctx, args, getenv, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usagef("unknown command %q\n%s", cmd, usage)
}

const configUsage = "usage: junction config validate FILE | junction config reload [--console URL] | junction config defaults"

const usage = `usage:
  junction [serve] [flags]        start the broker (junction serve -h lists the flags)
  junction config validate FILE   check a configuration file, reporting every error with its line
  junction config reload [--console URL]   the running broker reads its configuration again (also SIGHUP, or editing the file); prints what was applied and what needs a restart
  junction cert dev [flags]       write a self-signed CA, server and client certificates for local TLS (junction cert dev -h)
  junction config defaults        print every option with its default, as YAML (testdata/config/full.yaml)
  junction user add|passwd|roles|rm|ls --file FILE ...   manage the users file of --users (junction user -h)
  junction version                print the version
  junction queue|conn ...         administer a running broker through its console's API (junction queue -h)
  junction cluster status|add|remove ...   a cluster's members and groups, membership changes (junction cluster -h)
  junction send|receive ...       send or receive a message over STOMP, for quick tests
  junction bench [flags]          load-test any STOMP, MQTT or AMQP broker (junction bench -h)

exit status: 0 success (and -h, --help, help); 1 the command failed (broker unreachable,
  an error from the API or the broker, a timeout, an invalid file); 2 a wrong command line
  (unknown command or flag, a missing or extra argument, a bad flag value)
`

// validateFile reports every error of a configuration file.
func validateFile(path string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if _, errs := parseConfig(data); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintf(stdout, "%s: %v\n", path, e)
		}
		return fmt.Errorf("%s: %d error(s)", path, len(errs))
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return nil
}
