package main

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// listenNotify opens a real unixgram socket and points NOTIFY_SOCKET at it.
func listenNotify(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

func readNotify(t *testing.T, conn *net.UnixConn, d time.Duration) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(d))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message within %s: %v", d, err)
	}
	return string(buf[:n])
}

func TestSdNotifyWritesToTheSocket(t *testing.T) {
	conn := listenNotify(t)
	sent, err := sdNotify("READY=1")
	if err != nil || !sent {
		t.Fatalf("sent=%v err=%v", sent, err)
	}
	if got := readNotify(t, conn, time.Second); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
}

func TestSdNotifyWithoutSocketDoesNothing(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := sdNotify("READY=1"); sent || err != nil {
		t.Fatalf("sent=%v err=%v", sent, err)
	}
}

func TestWatchdogIntervalIsHalfTheTimeoutForThisProcess(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "4000000")
	t.Setenv("WATCHDOG_PID", "")
	if got := watchdogInterval(); got != 2*time.Second {
		t.Fatalf("interval %s", got)
	}
	t.Setenv("WATCHDOG_PID", "1")
	if got := watchdogInterval(); got != 0 {
		t.Fatalf("watchdog meant for pid 1 applied here: %s", got)
	}
}

func TestSdNotifyDoesNotBlockOnAFullSocket(t *testing.T) {
	listenNotify(t) // never read
	start := time.Now()
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		_, err = sdNotify("WATCHDOG=1")
	}
	if err == nil {
		t.Skip("the socket queue never filled")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("sd_notify blocked for %s", d)
	}
}
