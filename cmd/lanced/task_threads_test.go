package main

import (
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store"
)

func TestTaskThreadsFromEnv(t *testing.T) {
	t.Setenv("LANCED_TASK_THREADS", "3")
	t.Setenv("LANCED_TASK_MEMORY", "64MiB")
	if err := taskThreadsFromEnv(); err != nil {
		t.Fatal(err)
	}
	defer store.SetDirectWrites(true)
	t.Setenv("LANCED_DIRECT_IO", "false")
	if err := taskThreadsFromEnv(); err != nil || store.DirectWrites() {
		t.Fatalf("LANCED_DIRECT_IO=false: %v, direct writes %v", err, store.DirectWrites())
	}
	for _, c := range [][2]string{{"LANCED_TASK_THREADS", "-1"}, {"LANCED_TASK_THREADS", "many"}, {"LANCED_TASK_MEMORY", "lots"}, {"LANCED_DIRECT_IO", "maybe"}} {
		t.Setenv("LANCED_TASK_THREADS", "")
		t.Setenv("LANCED_TASK_MEMORY", "")
		t.Setenv("LANCED_DIRECT_IO", "")
		t.Setenv(c[0], c[1])
		err := taskThreadsFromEnv()
		if err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Errorf("%s=%s: %v, want an error naming the variable", c[0], c[1], err)
		}
	}
	t.Setenv("LANCED_TASK_THREADS", "")
	t.Setenv("LANCED_TASK_MEMORY", "")
	t.Setenv("LANCED_DIRECT_IO", "")
	if err := taskThreadsFromEnv(); err != nil {
		t.Fatal(err)
	}
}
