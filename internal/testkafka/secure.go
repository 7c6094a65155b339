package testkafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"
)

// CA is a certificate authority made for one test: a self-signed ECDSA
// certificate and its key. File holds the certificate as PEM, ready to be
// a client's tls.caFile.
type CA struct {
	Name string // the certificate's common name
	File string
	PEM  []byte

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a fresh authority; two calls give two unrelated ones, so
// that a test can present a CA that did not sign the server's certificate.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("queuebox test CA %d", serial(t))
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Name: name, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}
	ca.File = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca.File, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Pool is a certificate pool that trusts only ca.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ServerConfig is a server's TLS configuration: a certificate for
// 127.0.0.1, ::1 and localhost, signed by ca.
func (ca *CA) ServerConfig(t testing.TB) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(t),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}
}

func serialNumber(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func serial(t testing.TB) int {
	t.Helper()
	seq.Lock()
	defer seq.Unlock()
	seq.n++
	return seq.n
}

// User is a SASL user of a secured cluster. Mechanism is PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512.
type User struct {
	Mechanism, Username, Password string
}

// Security is what a secured cluster requires of its clients.
type Security struct {
	// CA, when set, makes the brokers listen with TLS only, presenting a
	// certificate that CA signed.
	CA *CA
	// Users, when there are any, makes the brokers require a SASL login
	// and accept these users (all superusers).
	Users []User
}

// NewSecure starts an in-process cluster of three brokers that requires
// what sec says, stopped when the test ends. It never uses the external
// cluster of $QUEUEBOX_TEST_KAFKA_BROKERS, whose security is not the
// test's. opts go to kfake after the security options.
//
// The cluster's own helpers (CreateTopic, NewReader, Transport) connect
// as a client that trusts sec.CA and logs in as the first user.
func NewSecure(t testing.TB, sec Security, opts ...kfake.Opt) *Cluster {
	t.Helper()
	all := []kfake.Opt{kfake.NumBrokers(3)}
	tr := &kafkago.Transport{ClientID: "queuebox-test", DialTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}
	if sec.CA != nil {
		all = append(all, kfake.TLS(sec.CA.ServerConfig(t)))
		tr.TLS = &tls.Config{RootCAs: sec.CA.Pool(), MinVersion: tls.VersionTLS12}
	}
	if len(sec.Users) > 0 {
		all = append(all, kfake.EnableSASL())
		for _, u := range sec.Users {
			all = append(all, kfake.Superuser(u.Mechanism, u.Username, u.Password))
		}
		m, err := clientLogin(sec.Users[0])
		if err != nil {
			t.Fatalf("testkafka: %v", err)
		}
		tr.SASL = m
	}
	c, err := start(append(all, opts...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	c.transport = tr
	t.Cleanup(func() {
		c.Close()
		tr.CloseIdleConnections()
	})
	return c
}

// clientLogin is the client side of a user's login.
func clientLogin(u User) (sasl.Mechanism, error) {
	switch u.Mechanism {
	case "PLAIN":
		return plain.Mechanism{Username: u.Username, Password: u.Password}, nil
	case "SCRAM-SHA-256":
		return scram.Mechanism(scram.SHA256, u.Username, u.Password)
	case "SCRAM-SHA-512":
		return scram.Mechanism(scram.SHA512, u.Username, u.Password)
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", u.Mechanism)
}

// Transport is how a test's own kafka-go clients (a writer, a client)
// reach the cluster: for a secured cluster with its CA and first user,
// otherwise kafka-go's default transport.
func (c *Cluster) Transport() kafkago.RoundTripper {
	if c.transport != nil {
		return c.transport
	}
	return kafkago.DefaultTransport
}
