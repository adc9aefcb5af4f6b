package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/lanced-dev/lanced/internal/store"
)

// LocalOwner names a one-shot process on this host as a journal owner:
// "<prefix>@<host>/<pid>". A later process on the same host can tell
// whether that process is still running (AbandonDeadLocalOwners) and, if
// not, hand its leftovers to cleanup at once instead of after the
// in-flight window.
func LocalOwner(prefix string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s/%d", prefix, host, os.Getpid())
}

// localOwnerPID returns the pid of an owner named by LocalOwner on this
// host, or false for any other owner.
func localOwnerPID(owner string) (int, bool) {
	at := strings.LastIndexByte(owner, '@')
	slash := strings.LastIndexByte(owner, '/')
	if at < 0 || slash < at {
		return 0, false
	}
	host, _ := os.Hostname()
	if owner[at+1:slash] != host {
		return 0, false
	}
	pid, err := strconv.Atoi(owner[slash+1:])
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// AbandonDeadLocalOwners marks abandoned every journal entry of the table
// whose owner is a process on this host that no longer runs (killed, or
// crashed), so the next cleanup pass deletes its unreferenced outputs.
// Entries of live processes and of other hosts are left alone: a file of a
// task that may still commit must never be deleted.
func AbandonDeadLocalOwners(ctx context.Context, b *store.Bucket) (int, error) {
	entries, err := ListPending(ctx, b, slog.Default())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if e.Abandoned {
			continue
		}
		pid, ok := localOwnerPID(e.Owner)
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := NewTaskJournal(b, e.Owner).Abandon(ctx, e.TaskID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
