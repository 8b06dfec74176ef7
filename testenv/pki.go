package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the credentials the control plane uses. They live in the data dir and
// are generated once, so that a restart on the same data dir keeps every kubeconfig valid.
type pki struct {
	dir        string
	caCert     string
	servingCrt string
	servingKey string
	saKey      string
	saPub      string
	tokenFile  string
	adminToken string
}

const adminUser = "inpool-admin"

func loadOrCreatePKI(dir string) (*pki, error) {
	p := &pki{
		dir:        dir,
		caCert:     filepath.Join(dir, "ca.crt"),
		servingCrt: filepath.Join(dir, "serving.crt"),
		servingKey: filepath.Join(dir, "serving.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		tokenFile:  filepath.Join(dir, "tokens.csv"),
	}
	tokenPath := filepath.Join(dir, "admin.token")
	if token, err := os.ReadFile(tokenPath); err == nil {
		p.adminToken = string(token)
		return p, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := p.generate(); err != nil {
		return nil, fmt.Errorf("generating credentials in %s: %w", dir, err)
	}
	// Written last: its presence means every other file is complete.
	return p, os.WriteFile(tokenPath, []byte(p.adminToken), 0o600)
}

func (p *pki) generate() error {
	caKey, caCert, err := newCA()
	if err != nil {
		return err
	}
	if err := writePEM(p.caCert, "CERTIFICATE", caCert.Raw); err != nil {
		return err
	}
	if err := p.writeServingCert(caKey, caCert); err != nil {
		return err
	}
	if err := p.writeServiceAccountKeys(); err != nil {
		return err
	}
	p.adminToken, err = randomHex(32)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.adminToken, adminUser, adminUser)
	return os.WriteFile(p.tokenFile, []byte(line), 0o600)
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := certTemplate("inpool-testenv-ca")
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

func (p *pki) writeServingCert(caKey *ecdsa.PrivateKey, caCert *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := certTemplate("kube-apiserver")
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(p.servingCrt, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(p.servingKey, "PRIVATE KEY", keyDER)
}

func (p *pki) writeServiceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return err
	}
	return writePEM(p.saPub, "PUBLIC KEY", pubDER)
}

func certTemplate(commonName string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
	}
}

func writePEM(path, blockType string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
