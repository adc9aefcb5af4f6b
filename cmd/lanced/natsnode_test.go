package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServerEnv makes the test binary run a nats-server from the config
// file it names (see TestMain), so tests can kill -9 a NATS node.
const natsServerEnv = "LANCED_TEST_NATS_SERVER"

// runTestNATSServer is the test binary acting as nats-server: it serves the
// config file until killed.
func runTestNATSServer(cfgPath string) int {
	opts, err := server.ProcessConfigFile(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats-server config:", err)
		return 1
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats-server:", err)
		return 1
	}
	s.ConfigureLogger()
	s.Start()
	s.WaitForShutdown()
	return 0
}

// natsNode is one nats-server OS process of a test cluster.
type natsNode struct {
	name, cfg, log string
	clientAddr     string
	cmd            *exec.Cmd
	done           chan struct{}
}

// natsCluster writes the config of n clustered JetStream nodes under root
// (client and route ports on 127.0.0.1) and starts them. extra is added to
// every node's config (auth, TLS).
func natsCluster(t *testing.T, root string, n int, extra string) []*natsNode {
	t.Helper()
	clients, routes := make([]string, n), make([]string, n)
	for i := range n {
		clients[i], routes[i] = freeAddr(t), freeAddr(t)
	}
	var routeURLs []string
	for _, r := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("%q", "nats-route://"+r))
	}
	nodes := make([]*natsNode, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf(`
server_name: %q
listen: %q
jetstream { store_dir: %q }
cluster {
  name: "lanced-test"
  listen: %q
  routes: [%s]
}
%s
`, name, clients[i], filepath.Join(dir, "js"), routes[i], strings.Join(routeURLs, ", "), extra)
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes[i] = &natsNode{name: name, cfg: path, log: filepath.Join(dir, "nats.log"), clientAddr: clients[i]}
	}
	for _, nn := range nodes {
		nn.start(t)
	}
	return nodes
}

func (nn *natsNode) url() string { return "nats://" + nn.clientAddr }

func (nn *natsNode) start(t *testing.T) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(nn.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	nn.cmd = exec.Command(bin)
	nn.cmd.Env = append(os.Environ(), natsServerEnv+"="+nn.cfg)
	nn.cmd.Stdout, nn.cmd.Stderr = logf, logf
	if err := nn.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nn.done = make(chan struct{})
	go func() { _ = nn.cmd.Wait(); logf.Close(); close(nn.done) }()
	cmd, done := nn.cmd, nn.done
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			if b, err := os.ReadFile(nn.log); err == nil {
				t.Logf("%s log (tail):\n%s", nn.name, tail(string(b), 4000))
			}
		}
	})
}

// kill9 kills the node's process without a chance to clean up.
func (nn *natsNode) kill9(t *testing.T) {
	t.Helper()
	if err := nn.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-nn.done
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitJetStream waits until a client of url sees JetStream with a meta
// leader (account info answers), i.e. the cluster can create streams.
func waitJetStream(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	waitUntil(t, 60*time.Second, "jetstream ready at "+url, func() bool {
		return withJetStream(url, 2*time.Second, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.AccountInfo(ctx)
			return err
		}, opts...) == nil
	})
}

// withJetStream connects to url with opts and calls do with a JetStream
// client and a context; connecting and do each get timeout.
func withJetStream(url string, timeout time.Duration, do func(context.Context, jetstream.JetStream) error, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append(opts, nats.Timeout(timeout))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return do(ctx, js)
}
