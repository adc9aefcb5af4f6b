package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// sdNotify sends one sd_notify(3) message to $NOTIFY_SOCKET (a unixgram
// socket; a leading '@' means the abstract namespace). Without the
// variable it does nothing and reports false.
func sdNotify(state string) (bool, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false, nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify dial: %w", err)
	}
	defer conn.Close()
	// Never let a stuck receiver block the daemon (a full socket queue
	// blocks a datagram send).
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sd_notify write: %w", err)
	}
	return true, nil
}

// watchdogInterval is half of $WATCHDOG_USEC when the watchdog is meant
// for this process ($WATCHDOG_PID unset or ours), else 0.
func watchdogInterval() time.Duration {
	usec := os.Getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Microsecond / 2
}
