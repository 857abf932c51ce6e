package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/junctionmq/junction/internal/minica"
)

const certUsage = `usage: junction cert dev [-dir DIR] [-hosts NAMES] [-client NAME] [-node ID] [-force]

Writes a development CA and a server certificate for localhost, 127.0.0.1
and ::1 (ECDSA P-256; the CA valid 10 years, certificates 1 year), and
optionally a client certificate signed by the same CA, or a cluster
node's certificate (server and client use, for the same hosts). An
existing CA in DIR is reused and existing files are kept, unless -force.
`

// runCert runs `junction cert ...`.
func runCert(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "dev" {
		return usagef("%s", certUsage)
	}
	fset := flag.NewFlagSet("junction cert dev", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, certUsage)
		fset.PrintDefaults()
	}
	dir := fset.String("dir", filepath.Join("data", "tls"), "directory for the certificates and keys")
	hosts := fset.String("hosts", "", "more names or IP addresses for the server certificate, comma-separated")
	client := fset.String("client", "", "also write a client certificate with this common name (client-NAME.pem)")
	node := fset.Uint64("node", 0, "also write cluster node ID's certificate (node-ID.pem) for --cluster-tls-cert")
	force := fset.Bool("force", false, "replace existing files, CA included")
	if err := parseFlags(fset, args[1:]); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usagef("cert dev: unexpected argument %q", fset.Arg(0))
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	for h := range strings.SplitSeq(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	if *client != "" && strings.ContainsAny(*client, `/\`) {
		return usagef("cert dev: -client %q: a name without slashes, please", *client)
	}
	return certDev(certDevOptions{dir: *dir, hosts: names, client: *client, node: *node, force: *force}, stdout)
}

type certDevOptions struct {
	dir    string
	hosts  []string // for the server certificate
	client string   // common name of a client certificate; "" for none
	node   uint64   // cluster node whose certificate to write; 0 for none
	force  bool     // replace existing files
}

// certDev writes the development CA, server and client files of o into
// o.dir and tells stdout how to use them.
func certDev(o certDevOptions, stdout io.Writer) error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(o.dir, name) }
	caCert, caKey := path("ca.pem"), path("ca-key.pem")
	srvCert, srvKey := path("server.pem"), path("server-key.pem")

	// The CA: reused if there, so that later runs (-client) sign with
	// the CA clients already trust.
	var ca *minica.CA
	caExists, err := pairExists(caCert, caKey)
	if err != nil {
		return err
	}
	srvExists, err := pairExists(srvCert, srvKey)
	if err != nil {
		return err
	}
	if caExists && !o.force {
		certPEM, err := os.ReadFile(caCert)
		if err != nil {
			return err
		}
		keyPEM, err := os.ReadFile(caKey)
		if err != nil {
			return err
		}
		if ca, err = minica.LoadCA(certPEM, keyPEM); err != nil {
			return fmt.Errorf("%s: %w (use -force to make a new CA)", caCert, err)
		}
		fmt.Fprintf(stdout, "kept    %-40s CA certificate\n", caCert)
	} else {
		if srvExists && !o.force {
			return fmt.Errorf("%s exists but %s does not: use -force to make a new CA and server certificate", srvCert, caCert)
		}
		if ca, err = minica.NewCA(devCAName()); err != nil {
			return err
		}
		if err := writePair(caCert, ca.CertPEM, caKey, ca.KeyPEM, o.force); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote   %-40s CA certificate: make clients trust it\n", caCert)
		fmt.Fprintf(stdout, "wrote   %-40s CA key: keep it private\n", caKey)
		srvExists = false // signed by the old CA, if any: replace it
	}

	if srvExists && !o.force {
		fmt.Fprintf(stdout, "kept    %-40s server certificate (use -force to replace it)\n", srvCert)
	} else {
		srv, err := ca.Server(o.hosts...)
		if err != nil {
			return err
		}
		if err := writePair(srvCert, srv.CertPEM, srvKey, srv.KeyPEM, true); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote   %-40s server certificate for %s\n", srvCert, strings.Join(o.hosts, ", "))
		fmt.Fprintf(stdout, "wrote   %-40s server key\n", srvKey)
	}

	var cliCert, cliKey string
	if o.client != "" {
		cliCert, cliKey = path("client-"+o.client+".pem"), path("client-"+o.client+"-key.pem")
		cli, err := ca.Client(o.client)
		if err != nil {
			return err
		}
		if err := writePair(cliCert, cli.CertPEM, cliKey, cli.KeyPEM, o.force); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote   %-40s client certificate for %q\n", cliCert, o.client)
		fmt.Fprintf(stdout, "wrote   %-40s client key\n", cliKey)
	}

	var nodeCert, nodeKey string
	if o.node != 0 {
		id := strconv.FormatUint(o.node, 10)
		nodeCert, nodeKey = path("node-"+id+".pem"), path("node-"+id+"-key.pem")
		nc, err := ca.Node("junction-node-"+id, o.hosts...)
		if err != nil {
			return err
		}
		if err := writePair(nodeCert, nc.CertPEM, nodeKey, nc.KeyPEM, o.force); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote   %-40s cluster node %s's certificate for %s\n", nodeCert, id, strings.Join(o.hosts, ", "))
		fmt.Fprintf(stdout, "wrote   %-40s its key\n", nodeKey)
		fmt.Fprintf(stdout, "\nLink cluster node %s with:\n  junction --cluster-node-id %s --cluster-tls-cert %s --cluster-tls-key %s --cluster-tls-ca %s ...\n",
			id, id, nodeCert, nodeKey, caCert)
	}

	fmt.Fprintf(stdout, `
Serve TLS with:
  junction --tls-cert %s --tls-key %s
Ask clients for certificates signed by this CA with:
  --tls-client-ca %s (and --tls-require-client-cert=true to refuse clients without one)
Try it:
  openssl s_client -connect 127.0.0.1:PORT -CAfile %s`, srvCert, srvKey, caCert, caCert)
	if o.client != "" {
		fmt.Fprintf(stdout, " -cert %s -key %s", cliCert, cliKey)
	}
	fmt.Fprintln(stdout)
	return nil
}

// devCAName names the CA after the machine, so that it can be told apart
// in a trust store.
func devCAName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return "Junction development CA (" + h + ")"
	}
	return "Junction development CA"
}

// pairExists reports whether both files exist, and fails if only one
// does.
func pairExists(cert, key string) (bool, error) {
	c, err := exists(cert)
	if err != nil {
		return false, err
	}
	k, err := exists(key)
	if err != nil {
		return false, err
	}
	if c != k {
		return false, fmt.Errorf("%s and %s: one exists without the other; remove it or use -force", cert, key)
	}
	return c, nil
}

func exists(name string) (bool, error) {
	_, err := os.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// writePair writes a certificate (0644) and its key (0600). Without
// replace, it fails if either exists.
func writePair(certFile string, certPEM []byte, keyFile string, keyPEM []byte, replace bool) error {
	if !replace {
		if e, err := pairExists(certFile, keyFile); err != nil || e {
			if err == nil {
				err = fmt.Errorf("%s exists: use -force to replace it", certFile)
			}
			return err
		}
	}
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, certPEM, 0o644)
}

// writeFile writes data to name with mode perm through a temporary file
// and a rename, so that a reader (a broker reloading on SIGHUP) never
// sees half a file and an existing key never has a wider mode.
func writeFile(name string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly once renamed
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
