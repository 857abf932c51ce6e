// Package minica makes certificate authorities and certificates, for
// tests and for `junction cert dev`. Keys are ECDSA P-256; certificates
// and keys come both parsed and PEM-encoded (keys as PKCS #8 "PRIVATE
// KEY" blocks), ready for files or for tls.X509KeyPair.
//
//	ca, err := minica.NewCA("test CA")
//	srv, err := ca.Server("localhost", "127.0.0.1", "::1")
//	cli, err := ca.Client("alice")
//	pool := ca.Pool() // for tls.Config RootCAs or ClientCAs
//
// Nothing here is meant for production certificates: there is no
// revocation, and CA keys live in plain files.
package minica

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Validity periods. A leaf stays under the 398 days that browsers and
// Apple platforms accept for TLS server certificates.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	LeafValidity = 365 * 24 * time.Hour

	// backdate is subtracted from NotBefore, for clocks a little behind.
	backdate = time.Hour
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	key     *ecdsa.PrivateKey
}

// Cert is a certificate and its key.
type Cert struct {
	Cert    *x509.Certificate
	CertPEM []byte // the certificate alone, not its CA
	KeyPEM  []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named commonName, valid for CAValidity,
// that may sign leaf certificates only (path length zero).
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Junction (development)"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	c, err := create(tmpl, tmpl, key, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c.Cert, CertPEM: c.CertPEM, KeyPEM: c.KeyPEM, key: key}, nil
}

// LoadCA returns the CA whose certificate and key are certPEM and keyPEM,
// as written from a CA's CertPEM and KeyPEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("minica: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("minica: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("minica: the certificate is not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("minica: no PEM key")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err != nil {
			return nil, fmt.Errorf("minica: %w", err)
		}
		var ok bool
		if key, ok = k.(*ecdsa.PrivateKey); !ok {
			return nil, fmt.Errorf("minica: a %T key, want ECDSA", k)
		}
	case "EC PRIVATE KEY":
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, fmt.Errorf("minica: %w", err)
		}
	default:
		return nil, fmt.Errorf("minica: PEM block %q, want a private key", kb.Type)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("minica: the key does not match the certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, KeyPEM: keyPEM, key: key}, nil
}

// Pool returns a pool holding the CA's certificate, for tls.Config's
// RootCAs (clients) or ClientCAs (servers).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for hosts, each a DNS name or an IP
// address, valid for LeafValidity. Its common name is the first host.
func (ca *CA) Server(hosts ...string) (*Cert, error) {
	if len(hosts) == 0 {
		return nil, errors.New("minica: a server certificate needs a host")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.Issue(tmpl)
}

// Node issues a certificate for a cluster node: server and client use
// (a node both accepts and dials its peers), for hosts like Server.
func (ca *CA) Node(commonName string, hosts ...string) (*Cert, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.Issue(tmpl)
}

// Client issues a client certificate whose common name is commonName,
// valid for LeafValidity.
func (ca *CA) Client(commonName string) (*Cert, error) {
	return ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// Issue signs a certificate for a new key from tmpl, which it may
// change. It sets the serial number and, when they are zero, NotBefore
// (now), NotAfter (NotBefore plus LeafValidity) and KeyUsage (digital
// signature); tests set them to make certificates not yet or no longer
// valid.
func (ca *CA) Issue(tmpl *x509.Certificate) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-backdate)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = tmpl.NotBefore.Add(backdate + LeafValidity)
	}
	if tmpl.KeyUsage == 0 {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	return create(tmpl, ca.Cert, key, ca.key)
}

// TLSCertificate returns c as a tls.Certificate, for tls.Config's
// Certificates.
func (c *Cert) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.key, Leaf: c.Cert}
}

// create signs tmpl (given a random serial) with parent and signer and
// returns the certificate of key.
func create(tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) (*Cert, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("minica: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("minica: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("minica: %w", err)
	}
	return &Cert{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		key:     key,
	}, nil
}
