package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/junctionmq/junction/security"
)

const userUsage = `usage:
  junction user add    --file FILE NAME [--password PW | --no-password] [--role ROLE]...
  junction user passwd --file FILE NAME [--password PW]
  junction user roles  --file FILE NAME [--role ROLE]...
  junction user rm     --file FILE NAME
  junction user ls     --file FILE

Manages the users file a broker reads with --users (bcrypt password
hashes and roles; written atomically with mode 0600). A running broker
picks the changes up within a few seconds. Without --password the
password is read from the terminal (twice, not echoed) or from the
first line of standard input, which keeps it out of the process list.
--role may be repeated or given a comma-separated list. --no-password
adds a user that can only log in with a client certificate (AMQP SASL
EXTERNAL, the certificate's subject as the name), listed for its roles.
--file defaults to $JUNCTION_USERS.
`

// roleList collects --role values.
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }

func (r *roleList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*r = append(*r, s)
		}
	}
	return nil
}

// runUser runs `junction user ...`.
func runUser(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", userUsage)
	}
	sub, args := args[0], args[1:]
	fset := flag.NewFlagSet("junction user "+sub, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, userUsage)
		fset.PrintDefaults()
	}
	file := fset.String("file", getenv("JUNCTION_USERS"), "the users file")
	var password *string
	var roles roleList
	noPassword := new(bool)
	switch sub {
	case "add", "passwd":
		password = fset.String("password", "", "the password (default: read from the terminal or stdin)")
	}
	switch sub {
	case "add", "roles":
		fset.Var(&roles, "role", "a role of the user (repeatable, or comma-separated)")
	}
	if sub == "add" {
		noPassword = fset.Bool("no-password", false, "a client-certificate user: no password, listed for its roles")
	}
	switch sub {
	case "add", "passwd", "roles", "rm", "ls":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, userUsage)
		return nil
	default:
		return usagef("unknown user command %q\n%s", sub, userUsage)
	}
	// Flags may come before and after the user name.
	var names []string
	for {
		if err := parseFlags(fset, args); err != nil {
			return err
		}
		if fset.NArg() == 0 {
			break
		}
		names = append(names, fset.Arg(0))
		args = fset.Args()[1:]
	}
	if *file == "" {
		return usagef("user: --file is required (or set JUNCTION_USERS)")
	}
	wantNames := 1
	if sub == "ls" {
		wantNames = 0
	}
	if len(names) != wantNames {
		return usagef("user %s: want %d user name(s), got %d\n%s", sub, wantNames, len(names), userUsage)
	}

	users, err := security.LoadUsers(*file)
	if errors.Is(err, fs.ErrNotExist) && sub == "add" {
		users, err = &security.Users{}, nil
	}
	if err != nil {
		return err
	}
	if sub == "ls" {
		for _, n := range users.Names() {
			fmt.Fprintf(stdout, "%s\t%s\n", n, strings.Join(users.Users[n].Roles, ","))
		}
		return nil
	}
	name := names[0]
	if password != nil && *password == "" && isFlagSet(fset, "password") {
		// Given but empty (--password ''): refused, not taken as absent
		// (which would prompt, or read stdin).
		hint := "leave the flag out to be asked for it"
		if sub == "add" {
			hint += ", or give --no-password for a certificate user"
		}
		return usagef("user %s: --password is empty: a password cannot be empty (%s)", sub, hint)
	}
	readPassword := func() (string, error) {
		if *password != "" {
			return *password, nil
		}
		return promptPassword(stdin, stderr)
	}
	switch sub {
	case "add":
		var pw string
		if *noPassword {
			if *password != "" {
				return usagef("user add: --password and --no-password exclude each other")
			}
		} else if pw, err = readPassword(); err != nil {
			return err
		}
		if err := users.Add(name, pw, roles); err != nil {
			return err
		}
	case "passwd":
		if _, ok := users.Users[name]; !ok {
			return fmt.Errorf("%w: %q", security.ErrNoSuchUser, name)
		}
		pw, err := readPassword()
		if err != nil {
			return err
		}
		if err := users.SetPassword(name, pw); err != nil {
			return err
		}
	case "roles":
		if err := users.SetRoles(name, roles); err != nil {
			return err
		}
	case "rm":
		if err := users.Remove(name); err != nil {
			return err
		}
	}
	if err := users.Save(*file); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s %s\n", *file, map[string]string{
		"add": "added", "passwd": "changed the password of", "roles": "set the roles of", "rm": "removed",
	}[sub], name)
	return nil
}

// promptPassword reads a password: from a terminal twice without echo,
// otherwise the first line of stdin. An empty password is refused.
func promptPassword(stdin io.Reader, stderr io.Writer) (string, error) {
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprint(stderr, "Password: ")
		pw, err := readNoEcho(f)
		fmt.Fprintln(stderr)
		if err != nil {
			return "", err
		}
		fmt.Fprint(stderr, "Again: ")
		again, err := readNoEcho(f)
		fmt.Fprintln(stderr)
		if err != nil {
			return "", err
		}
		if pw != again {
			return "", errors.New("the passwords differ")
		}
		if pw == "" {
			return "", errors.New("empty password")
		}
		return pw, nil
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) { // an empty stdin is an empty password, below
		return "", fmt.Errorf("reading the password from stdin: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", errors.New("empty password (give --password or a line on stdin)")
	}
	return pw, nil
}

// readLine reads one line from f byte by byte (no buffering past it).
func readLine(f *os.File) (string, error) {
	var b []byte
	var c [1]byte
	for {
		n, err := f.Read(c[:])
		if n == 1 {
			if c[0] == '\n' {
				break
			}
			b = append(b, c[0])
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				break
			}
			return "", err
		}
	}
	return strings.TrimRight(string(b), "\r"), nil
}
