package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the credentials of one cluster, written as PEM files in dir.
type pki struct {
	caCert, adminCert, adminKey                                   []byte // PEM
	caFile, servingCertFile, servingKeyFile, saKeyFile, saPubFile string
}

func writePEM(path, typ string, der []byte) ([]byte, error) {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	return b, os.WriteFile(path, b, 0o600)
}

func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile:          filepath.Join(dir, "ca.crt"),
		servingCertFile: filepath.Join(dir, "apiserver.crt"),
		servingKeyFile:  filepath.Join(dir, "apiserver.key"),
		saKeyFile:       filepath.Join(dir, "sa.key"),
		saPubFile:       filepath.Join(dir, "sa.pub"),
	}
	now := time.Now().Add(-time.Hour)
	serial := func() *big.Int { n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)); return n }

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "configmap-attacher-test-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if p.caCert, err = writePEM(p.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}

	leaf := func(tmpl *x509.Certificate, certFile, keyFile string) (certPEM, keyPEM []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial(), now, now.Add(10*365*24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		if certPEM, err = writePEM(certFile, "CERTIFICATE", der); err != nil {
			return nil, nil, err
		}
		keyPEM, err = writePEM(keyFile, "EC PRIVATE KEY", kDER)
		return certPEM, keyPEM, err
	}
	if _, _, err := leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}, p.servingCertFile, p.servingKeyFile); err != nil {
		return nil, err
	}
	if p.adminCert, p.adminKey, err = leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "cluster-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")); err != nil {
		return nil, err
	}

	// Service-account token signing key (RSA, as kubeadm does).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if _, err := writePEM(p.saKeyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if _, err := writePEM(p.saPubFile, "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}
	return p, nil
}
