package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startEmbeddedNATS runs a nats-server with JetStream stored under
// stateDir/jetstream. With listen empty the server opens no TCP port and
// the daemon connects in-process; with listen set, other lanced nodes (and
// the nats CLI) can connect to it.
//
// An open listener requires what cfg configures: the node's user and
// password, its nkey plus AuthorizedNKeys, and/or TLS with client
// certificates; only Insecure lets it accept anyone, with a warning.
func startEmbeddedNATS(stateDir string, cfg natsConfig, log *slog.Logger) (*server.Server, error) {
	listen := cfg.Listen
	storeDir := filepath.Join(stateDir, "jetstream")
	if err := os.MkdirAll(storeDir, 0o750); err != nil {
		return nil, fmt.Errorf("create jetstream store %s: %w", storeDir, err)
	}
	opts := &server.Options{
		ServerName: "lanced",
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true, // the daemon owns signals
		NoLog:      true,
		DontListen: listen == "",
	}
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen %q: %w", listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen %q: port: %w", listen, err)
		}
		opts.Host, opts.Port = host, p
		if err := embeddedAuth(opts, cfg); err != nil {
			return nil, err
		}
		if cfg.Insecure && len(opts.Users) == 0 && len(opts.Nkeys) == 0 && !opts.TLSVerify {
			log.Warn("embedded nats accepts connections without authentication (insecure = true)", "addr", listen)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s (store %s)", storeDir)
	}
	if listen != "" {
		log.Info("embedded nats listening", "addr", ns.Addr().String())
	} else {
		log.Info("embedded nats started", "store", storeDir)
	}
	return ns, nil
}

// embeddedAuth configures the embedded server's listener from cfg.
func embeddedAuth(opts *server.Options, cfg natsConfig) error {
	if cfg.User != "" {
		pw, err := readSecretFile(cfg.PasswordFile)
		if err != nil {
			return err
		}
		opts.Users = []*server.User{{Username: cfg.User, Password: pw}}
	}
	if cfg.NKeySeedFile != "" {
		pub, err := publicNKey(cfg.NKeySeedFile)
		if err != nil {
			return err
		}
		for _, k := range append([]string{pub}, cfg.AuthorizedNKeys...) {
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: k})
		}
	}
	if t := cfg.TLS; t != nil && t.CertFile != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile, Verify: t.VerifyClients})
		if err != nil {
			return fmt.Errorf("embedded nats tls: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, t.VerifyClients
	}
	return nil
}

// readSecretFile reads a password file (surrounding whitespace dropped).
// The error names the file, never its content.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("nats password_file: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("nats password_file %s is empty", path)
	}
	return pw, nil
}

// publicNKey is the public key of the nkey seed in path.
func publicNKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("nats nkey_seed_file: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("nats nkey_seed_file %s: not an nkey seed", path)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("nats nkey_seed_file %s: not a user nkey seed (want one starting with SU)", path)
	}
	return pub, nil
}

func validUserNKey(k string) bool { return nkeys.IsValidPublicUserKey(k) }

// natsAuthOptions are the client options for how this node authenticates.
func natsAuthOptions(cfg natsConfig) ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case cfg.Credentials != "":
		opts = append(opts, nats.UserCredentials(cfg.Credentials))
	case cfg.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey_seed_file %s: not an nkey seed", cfg.NKeySeedFile)
		}
		opts = append(opts, o)
	case cfg.User != "":
		pw, err := readSecretFile(cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(cfg.User, pw))
	}
	return opts, nil
}

// connectNATS connects to the embedded server in-process, or to the
// configured cluster with credentials and TLS.
func connectNATS(ctx context.Context, cfg natsConfig, ns *server.Server, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	}
	// A refusal (credentials, TLS) will not go away by retrying: it ends the
	// first connect. Later, while running, the client keeps retrying.
	refused := make(chan error, 1)
	noteRefusal := func(err error) {
		if err != nil && rejected(err) {
			select {
			case refused <- err:
			default:
			}
		}
	}
	opts = append(opts,
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { noteRefusal(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { noteRefusal(err) }))
	auth, err := natsAuthOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, auth...)
	url := cfg.URL
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
		url = ""
	} else {
		if t := cfg.TLS; t != nil {
			if t.CAFile != "" {
				opts = append(opts, nats.RootCAs(t.CAFile))
			}
			if t.CertFile != "" {
				opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
			}
		}
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil && rejected(err) {
		return nil, fmt.Errorf("connect nats %s: %w (check the nats credentials and tls settings)", redactURL(url), err)
	}
	if err != nil {
		return nil, fmt.Errorf("connect nats %s: %w", redactURL(url), err)
	}
	// With RetryOnFailedConnect the first connect may still be pending: it
	// is retried until the server answers (it may start after this node),
	// and said in the log meanwhile.
	began, warnAfter := time.Now(), natsWaitWarn
	for !nc.IsConnected() {
		select {
		case err := <-refused:
			nc.Close()
			return nil, fmt.Errorf("connect nats %s: %w (check the nats credentials and tls settings)", redactURL(url), err)
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("connect nats %s: stopped after %v without an answer: %s", redactURL(url),
				time.Since(began).Round(time.Millisecond), natsUnreachableAdvice)
		case <-time.After(100 * time.Millisecond):
		}
		if waited := time.Since(began); waited >= warnAfter {
			args := []any{"url", redactURL(url), "waited_ms", waited.Milliseconds(), "advice", natsUnreachableAdvice}
			if err := nc.LastError(); err != nil {
				args = append(args, "err", err)
			}
			log.Warn("nats not reachable yet, still trying", args...)
			warnAfter = min(2*warnAfter, warnAfter+time.Minute)
		}
	}
	return nc, nil
}

// natsWaitWarn is how long the first connect to an external NATS waits
// before it is logged as not reachable yet (then again after twice as long,
// at least once a minute).
var natsWaitWarn = 5 * time.Second

const natsUnreachableAdvice = "check nats.url (--nats-url) and that the NATS server is up and reachable from this node"

// rejected reports connection errors that mean the server refused this
// node: bad credentials or a failed TLS handshake.
func rejected(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrNkeysNotSupported) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) {
		return true
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	msg := err.Error()
	return errors.As(err, &cv) || errors.As(err, &ua) || strings.Contains(msg, "tls: ") || strings.Contains(msg, "x509: ") ||
		strings.Contains(strings.ToLower(msg), "authorization violation")
}

// redactURL hides user info in NATS URLs for logs and errors.
func redactURL(u string) string {
	if u == "" {
		return "in-process"
	}
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		if i := strings.Index(u, "://"); i >= 0 && i < at {
			return u[:i+3] + "***@" + u[at+1:]
		}
	}
	return u
}
