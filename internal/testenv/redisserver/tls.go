package redisserver

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
	"os"
	"path/filepath"
	"time"
)

// WriteCA writes a new self-signed certificate for 127.0.0.1 and
// localhost, which is its own CA, and its key, as the PEM files ca.pem and
// ca-key.pem in dir. A server presents it; a client trusts it as its CA.
// It is valid for a day.
func WriteCA(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redisserver test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// clientTLS returns the TLS configuration of a client that trusts only
// the CA of the PEM file caFile.
func clientTLS(caFile string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("redisserver: no certificate in " + caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// tlsArgs are the redis-server flags of a server that speaks TLS only, on
// port, with the certificate and key of the given files: no plain port,
// and no client certificates asked for.
func tlsArgs(port int, certFile, keyFile string) []string {
	return []string{
		"--port", "0",
		"--tls-port", fmt.Sprint(port),
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-auth-clients", "no",
	}
}

// TLSConfig returns a new TLS configuration of a client of the server:
// it trusts the server's CA only (verifying the certificate, whose names
// are 127.0.0.1 and localhost). Nil for a server without TLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}
