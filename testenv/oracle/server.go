package oracle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// One node process (server.mjs) per test binary serves every call, so node
// and the lancedb native module load once. LANCED_ORACLE_SERVER=0 runs a
// fresh node process per call instead. A call that times out kills the
// server; the next call starts a new one.

func serverEnabled() bool {
	return os.Getenv("LANCED_ORACLE_SERVER") != "0"
}

type serverResponse struct {
	ID     uint64 `json:"id"`
	OK     bool   `json:"ok"`
	Stdout string `json:"stdout"`
	Error  string `json:"error"`
	Usage  bool   `json:"usage"`
}

type server struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *tailBuffer
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan serverResponse
	dead    chan struct{} // closed when the process is gone
	deadErr error
}

var (
	serverMu sync.Mutex
	current  *server
)

// getServer returns the running server, starting one if needed.
func getServer() (*server, error) {
	serverMu.Lock()
	defer serverMu.Unlock()
	if current != nil {
		select {
		case <-current.dead:
		default:
			return current, nil
		}
	}
	s, err := startServer()
	if err != nil {
		return nil, err
	}
	current = s
	return s, nil
}

func startServer() (*server, error) {
	respR, respW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("oracle: server pipe: %w", err)
	}
	cmd := exec.Command("node", filepath.Join(Dir(), "server.mjs"))
	cmd.Dir = Dir()
	cmd.Env = nodeEnv()
	cmd.ExtraFiles = []*os.File{respW} // fd 3
	stderr := &tailBuffer{max: 64 << 10}
	cmd.Stderr = stderr
	cmd.Stdout = stderr // nothing should print there; keep it for diagnostics
	stdin, err := cmd.StdinPipe()
	if err != nil {
		respR.Close()
		respW.Close()
		return nil, fmt.Errorf("oracle: server stdin: %w", err)
	}
	if err := cmd.Start(); err != nil {
		respR.Close()
		respW.Close()
		return nil, fmt.Errorf("oracle: start node server: %w", err)
	}
	respW.Close()
	s := &server{
		cmd:     cmd,
		stdin:   stdin,
		stderr:  stderr,
		pending: map[uint64]chan serverResponse{},
		dead:    make(chan struct{}),
	}
	go s.readLoop(respR)
	return s, nil
}

func (s *server) readLoop(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<30)
	for sc.Scan() {
		var resp serverResponse
		if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
			continue
		}
		s.mu.Lock()
		ch := s.pending[resp.ID]
		delete(s.pending, resp.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	waitErr := s.cmd.Wait()
	s.mu.Lock()
	s.deadErr = fmt.Errorf("node server exited (%v): %s", waitErr, s.stderr.String())
	s.mu.Unlock()
	close(s.dead)
}

func (s *server) kill() {
	_ = s.cmd.Process.Kill()
}

// call runs one script in the server and returns its stdout.
func (s *server) call(ctx context.Context, script string, args []string) ([]byte, error) {
	ch := make(chan serverResponse, 1)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()
	req, err := json.Marshal(map[string]any{"id": id, "script": script, "args": args})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	_, err = s.stdin.Write(append(req, '\n'))
	s.mu.Unlock()
	if err != nil {
		return nil, &nodeError{script: script, args: args, err: fmt.Errorf("write request: %w", err), stderr: trimLog(s.stderr.String())}
	}
	select {
	case resp := <-ch:
		if resp.OK {
			return []byte(resp.Stdout), nil
		}
		return []byte(resp.Stdout), &nodeError{script: script, args: args, err: errors.New("failed"), stderr: trimLog("oracle: " + resp.Error)}
	case <-s.dead:
		s.mu.Lock()
		err := s.deadErr
		s.mu.Unlock()
		return nil, &nodeError{script: script, args: args, err: err, stderr: ""}
	case <-ctx.Done():
		// A stuck call may hold the native runtime: start afresh.
		s.kill()
		return nil, &nodeError{script: script, args: args, err: fmt.Errorf("%w; node server killed", ctx.Err()), stderr: trimLog(s.stderr.String())}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}
