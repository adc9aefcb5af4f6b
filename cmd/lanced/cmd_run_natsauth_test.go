package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func TestEmbeddedNATSListenerRequiresAuthentication(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, nats, wantErr string
	}{
		{"open listener", `listen = "127.0.0.1:4222"`, "without authentication"},
		{"insecure on purpose", "listen = \"127.0.0.1:4222\"\ninsecure = true", ""},
		{"user", fmt.Sprintf("listen = \"127.0.0.1:4222\"\nuser = \"l\"\npassword_file = %q", pw), ""},
		{"user without password", "listen = \"127.0.0.1:4222\"\nuser = \"l\"", "user and password_file go together"},
		{"two methods", fmt.Sprintf("url = \"nats://x:4222\"\nuser = \"l\"\npassword_file = %q\ncredentials = \"x.creds\"", pw), "Conflicting NATS credentials"},
		{"bad nkey", "listen = \"127.0.0.1:4222\"\nnkey_seed_file = \"s\"\nauthorized_nkeys = [\"Ubad\"]", "not a public user nkey"},
		{"mtls without own cert", "listen = \"127.0.0.1:4222\"\ntls {\n ca_file = \"ca.pem\"\n verify_clients = true\n}", "own certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".hcl")
			src := fmt.Sprintf("tables = [%q]\nnats {\n%s\n}\n", dir, tc.nats)
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := runMain([]string{"run", "--config", path, "--check-config"}, &out, &errb)
			switch {
			case tc.wantErr == "" && code != 0:
				t.Fatalf("exit %d: %s", code, errb.String())
			case tc.wantErr != "" && (code == 0 || !strings.Contains(errb.String(), tc.wantErr)):
				t.Fatalf("exit %d, stderr %q: want an error containing %q", code, errb.String(), tc.wantErr)
			}
		})
	}
}

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate signed by it, and a client certificate of another CA, as PEM
// files under dir.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey, rogueCert, rogueKey string }

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serial := int64(1)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, der, kder
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	leaf := func(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	}
	ca, caKey, caDER, _ := issue(caTmpl("lanced test CA"), nil, nil)
	rogueCA, rogueKey, _, _ := issue(caTmpl("rogue CA"), nil, nil)
	var p testPKI
	p.ca = writePEM("ca.pem", "CERTIFICATE", caDER)
	_, _, der, kder := issue(leaf("server", x509.ExtKeyUsageServerAuth), ca, caKey)
	p.serverCert, p.serverKey = writePEM("server.pem", "CERTIFICATE", der), writePEM("server-key.pem", "EC PRIVATE KEY", kder)
	_, _, der, kder = issue(leaf("node", x509.ExtKeyUsageClientAuth), ca, caKey)
	p.clientCert, p.clientKey = writePEM("client.pem", "CERTIFICATE", der), writePEM("client-key.pem", "EC PRIVATE KEY", kder)
	_, _, der, kder = issue(leaf("rogue", x509.ExtKeyUsageClientAuth), rogueCA, rogueKey)
	p.rogueCert, p.rogueKey = writePEM("rogue.pem", "CERTIFICATE", der), writePEM("rogue-key.pem", "EC PRIVATE KEY", kder)
	return p
}

// writeNKeySeed creates a user nkey, writes its seed to path and returns
// the seed and the public key.
func writeNKeySeed(t *testing.T, path string) (seed, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	if err := os.WriteFile(path, s, 0o600); err != nil {
		t.Fatal(err)
	}
	return string(s), pub
}

// TestNATSMutualTLSAndNKeysBetweenDaemons runs daemon a with the embedded
// NATS listening with mutual TLS and nkeys (its own and b's), and daemon b
// joining it with its seed and client certificate: both work on real-Lance
// tables. Clients without a valid certificate or an authorized nkey cannot
// connect, let alone read the task queue, and a daemon with a wrong seed
// exits with an error instead of waiting. Nothing either daemon emits (logs,
// /metrics, /healthz, /readyz, the rejected daemon's stderr) contains a
// seed, a password or the object-store secret in its environment.
func TestNATSMutualTLSAndNKeysBetweenDaemons(t *testing.T) {
	if testing.Short() {
		t.Skip("runs daemon processes")
	}
	oracle.Require(t)
	root := t.TempDir()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pki := newTestPKI(t, root)
	seedA, _ := writeNKeySeed(t, filepath.Join(root, "a.seed"))
	seedB, pubB := writeNKeySeed(t, filepath.Join(root, "b.seed"))
	seedC, _ := writeNKeySeed(t, filepath.Join(root, "c.seed")) // not authorized
	const awsSecret = "wJalrXUtnFEMI-K7MDENG-lanced-test-secret"
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIALANCEDTESTKEYID01")
	t.Setenv("AWS_SECRET_ACCESS_KEY", awsSecret)
	secrets := []string{seedA, seedB, seedC, awsSecret}

	tables := filepath.Join(root, "tables")
	for i := range 4 {
		oracle.Build(t, "appends", filepath.Join(tables, fmt.Sprintf("t%d", i)))
	}
	natsAddr, httpA, httpB := freeAddr(t), freeAddr(t), freeAddr(t)
	cfgA := writeProcConfig(t, root, "a", tables, fmt.Sprintf(`nats {
  embedded = true
  listen = %q
  nkey_seed_file = %q
  authorized_nkeys = [%q]
  tls {
    ca_file = %q
    cert_file = %q
    key_file = %q
    verify_clients = true
  }
}`, natsAddr, filepath.Join(root, "a.seed"), pubB, pki.ca, pki.serverCert, pki.serverKey), "", httpA)
	client := func(seed string) string {
		return fmt.Sprintf(`nats {
  url = "nats://%s"
  nkey_seed_file = %q
  tls {
    ca_file = %q
    cert_file = %q
    key_file = %q
  }
}`, natsAddr, seed, pki.ca, pki.clientCert, pki.clientKey)
	}
	cfgB := writeProcConfig(t, root, "b", tables, client(filepath.Join(root, "b.seed")), "", httpB)
	cfgC := writeProcConfig(t, root, "c", tables, client(filepath.Join(root, "c.seed")), "", "")

	a := startDaemonProc(t, bin, "a", cfgA, filepath.Join(root, "a"))
	waitRunning(t, a)
	b := startDaemonProc(t, bin, "b", cfgB, filepath.Join(root, "b"))
	waitRunning(t, b)

	checkOnlyAuthorizedClients(t, "nats://"+natsAddr, root, pki)
	outC := runRejectedDaemon(t, bin, cfgC)

	// Both daemons work.
	waitUntil(t, 90*time.Second, "both daemons executing tasks", func() bool {
		return a.has("task started", "", "") && b.has("task started", "", "")
	})
	waitUntil(t, 90*time.Second, "every table compacted", func() bool {
		for i := range 4 {
			tb := "file://" + filepath.Join(tables, fmt.Sprintf("t%d", i), "appends.lance")
			if !committedAfter([]*daemonProc{a, b}, tb, 0) {
				return false
			}
		}
		return true
	})
	checkNothingEmittedHasSecrets(t, secrets, map[string]string{"c stderr": outC}, []*daemonProc{a, b}, []string{httpA, httpB})
}

// checkOnlyAuthorizedClients: of raw clients of the NATS server at url,
// only one with b's authorized nkey (seed files under root) and a
// certificate of our CA gets in and reads the task queue.
func checkOnlyAuthorizedClients(t *testing.T, url, root string, pki testPKI) {
	t.Helper()
	tryConnect := func(opts ...nats.Option) error {
		return withJetStream(url, 5*time.Second, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.Stream(ctx, scheduler.TasksStream)
			return err
		}, opts...)
	}
	nkeyOpt := func(name string) nats.Option {
		o, err := nats.NkeyOptionFromSeed(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	caOpt := nats.RootCAs(pki.ca)
	goodCert := nats.ClientCert(pki.clientCert, pki.clientKey)
	for _, c := range []struct {
		name string
		opts []nats.Option
	}{
		{"no nkey", []nats.Option{caOpt, goodCert}},
		{"unauthorized nkey", []nats.Option{caOpt, goodCert, nkeyOpt("c.seed")}},
		{"no client certificate", []nats.Option{caOpt, nkeyOpt("b.seed")}},
		{"certificate of another CA", []nats.Option{caOpt, nats.ClientCert(pki.rogueCert, pki.rogueKey), nkeyOpt("b.seed")}},
		{"no TLS", []nats.Option{nkeyOpt("b.seed")}},
	} {
		if err := tryConnect(c.opts...); err == nil {
			t.Errorf("%s: connected and read the task queue", c.name)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
	}
	if err := tryConnect(caOpt, goodCert, nkeyOpt("b.seed")); err != nil {
		t.Errorf("b's nkey and certificate: %v", err)
	}
}

// runRejectedDaemon runs a daemon with cfg, whose nkey is not authorized:
// it must give up with a clear error (non-zero exit, the hint to check the
// credentials) before a minute. It returns what the daemon printed.
func runRejectedDaemon(t *testing.T, bin, cfg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmdC := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--node-id", "c")
	cmdC.Env = append(os.Environ(), execMainEnv+"=1")
	outC, err := cmdC.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Errorf("daemon with an unauthorized nkey: err %v, ctx %v; want a non-zero exit before the timeout\n%s", err, ctx.Err(), outC)
	} else if !strings.Contains(string(outC), "check the nats credentials") {
		t.Errorf("daemon with an unauthorized nkey: output lacks the hint:\n%s", outC)
	}
	return string(outC)
}

// checkNothingEmittedHasSecrets: no secret appears in emitted, the logs of
// procs, or what /metrics, /healthz and /readyz (each answering 200) serve
// at the HTTP addresses addrs.
func checkNothingEmittedHasSecrets(t *testing.T, secrets []string, emitted map[string]string, procs []*daemonProc, addrs []string) {
	t.Helper()
	for _, p := range procs {
		var sb strings.Builder
		for _, l := range p.snapshot() {
			fmt.Fprintln(&sb, l)
		}
		emitted[p.name+" log"] = sb.String()
	}
	for _, addr := range addrs {
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			code, body := httpGet("http://" + addr + path)
			if code != 200 {
				t.Errorf("GET %s%s: %d", addr, path, code)
			}
			emitted[addr+path] = body
		}
	}
	for where, text := range emitted {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains a secret (%.6s…)", where, s)
			}
		}
	}
}
