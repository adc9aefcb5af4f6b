package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/store"
)

// taskThreadsFromEnv applies the worker-level parallelism of one rewrite
// task: LANCED_TASK_THREADS columns encoded at once (default GOMAXPROCS)
// and LANCED_TASK_MEMORY, the bytes one task may hold (e.g. "256MiB";
// default 64 MiB); and LANCED_DIRECT_IO, whether data files written to
// local disks bypass the page cache (default true). A bad value is an
// error that names the variable.
func taskThreadsFromEnv() error {
	threads, budget := 0, int64(0)
	if v := os.Getenv("LANCED_TASK_THREADS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("LANCED_TASK_THREADS=%q: want a number of threads (0: GOMAXPROCS)", v)
		}
		threads = n
	}
	if v := os.Getenv("LANCED_TASK_MEMORY"); v != "" {
		n, err := policy.ParseSize(v)
		if err != nil || n > 1<<50 {
			return fmt.Errorf("LANCED_TASK_MEMORY=%q: want a size such as 256MiB", v)
		}
		budget = int64(n)
	}
	engine.SetTaskParallelism(threads, budget)
	if v := os.Getenv("LANCED_DIRECT_IO"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("LANCED_DIRECT_IO=%q: want true or false (false: data files on local disks are written through the page cache)", v)
		}
		store.SetDirectWrites(on)
	}
	return nil
}
