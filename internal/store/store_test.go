package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
)

func open(t *testing.T, uri string) *store.Bucket {
	t.Helper()
	b, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatalf("Open(%s): %v", uri, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformanceFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Bucket {
		return open(t, "file://"+t.TempDir())
	})
}

func TestConformanceBarePath(t *testing.T) {
	b := open(t, t.TempDir())
	if !strings.HasPrefix(b.URI(), "file:///") {
		t.Errorf("URI() = %q, want file:///...", b.URI())
	}
}

var memSeq atomic.Int64

func TestConformanceMem(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Bucket {
		return open(t, fmt.Sprintf("mem://conformance-%d", memSeq.Add(1)))
	})
}

func TestConformanceS3(t *testing.T) {
	runAtPrefixes(t, storetest.StartS3(t).URI)
}

// runAtPrefixes runs the conformance suite with a fresh prefix of one
// emulator per subtest.
func runAtPrefixes(t *testing.T, uri func(prefix string) string) {
	n := 0
	storetest.Run(t, func(t *testing.T) *store.Bucket {
		n++
		return open(t, uri(fmt.Sprintf("conf/%d/db", n)))
	})
}

func TestURIs(t *testing.T) {
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	if b.URI() != "file://"+dir {
		t.Errorf("URI() = %q", b.URI())
	}
	if got := b.Sub("t.lance").URI(); got != "file://"+filepath.Join(dir, "t.lance") {
		t.Errorf("Sub URI = %q", got)
	}
	s3 := storetest.StartS3(t)
	sb := open(t, s3.URI("a/b"))
	sub := sb.Sub("t.lance")
	if sub.URI() != "s3://lance/a/b/t.lance" || !strings.HasPrefix(sub.ConnURI(), "s3://lance/a/b/t.lance?") {
		t.Errorf("S3 Sub URI = %q, ConnURI = %q", sub.URI(), sub.ConnURI())
	}
	// A Sub's ConnURI opens the same root.
	if err := sub.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	again := open(t, sub.ConnURI())
	if got, err := again.Get(context.Background(), "k"); err != nil || string(got) != "v" {
		t.Errorf("reopened Sub URI: Get = %q, %v", got, err)
	}
	for _, bad := range []string{"ftp://x/y", "relative/path", "file://host/x", "mem://", "s3:///x"} {
		if _, err := store.Open(context.Background(), bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	_, err := store.Open(context.Background(), "file://"+filepath.Join(dir, "missing"))
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Open of a missing directory = %v, want ErrNotFound", err)
	}
}

func TestMemSharedByName(t *testing.T) {
	a := open(t, "mem://shared-by-name")
	b := open(t, "mem://shared-by-name")
	if err := a.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(context.Background(), "k"); err != nil || string(got) != "v" {
		t.Errorf("second Open of the same mem name: Get = %q, %v", got, err)
	}
	sub := a.Sub("t.lance")
	if err := sub.Put(context.Background(), "x", []byte("y")); err != nil {
		t.Fatal(err)
	}
	again := open(t, sub.URI())
	if got, err := again.Get(context.Background(), "x"); err != nil || string(got) != "y" || sub.URI() != "mem://shared-by-name/t.lance" {
		t.Errorf("reopened mem Sub %s: Get = %q, %v", sub.URI(), got, err)
	}
}

func TestFileTempFilesAreHiddenAndRemoved(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	ctx := context.Background()
	w, err := b.NewWriter(ctx, "_versions/5.manifest")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("x"))
	ents, _ := os.ReadDir(filepath.Join(dir, "_versions"))
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), ".5.manifest.") || !strings.HasSuffix(ents[0].Name(), store.TempSuffix) {
		t.Fatalf("staging files while writing = %v, want one hidden .lanced.tmp", ents)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(filepath.Join(dir, "_versions"))
	if len(ents) != 1 || ents[0].Name() != "5.manifest" {
		t.Errorf("after Close _versions holds %v, want only 5.manifest", ents)
	}
}

func TestInstrumentAndFaults(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, err := store.Instrument(open(t, "mem://instrumented"), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = b.Put(ctx, "k", []byte("v"))
	_, _ = b.Get(ctx, "k")
	_, _ = b.Get(ctx, "missing")
	boom := errors.New("injected")
	f := store.WithFaults(b, func(op, key string) error {
		if op == "delete" {
			return boom
		}
		return nil
	})
	if err := f.Delete(ctx, "k"); !errors.Is(err, boom) {
		t.Errorf("faulty Delete = %v, want the injected error", err)
	}
	if _, err := f.Get(ctx, "k"); err != nil {
		t.Errorf("faulty Get = %v, want success", err)
	}
	if got := counter(t, reg, "lanced_store_operations_total", "op=get"); got != 3 {
		t.Errorf("get operations = %v, want 3", got)
	}
	if got := counter(t, reg, "lanced_store_operation_failures_total", "op=get,code=not_found"); got != 1 {
		t.Errorf("get not_found failures = %v, want 1", got)
	}
	if got := counter(t, reg, "lanced_store_operation_failures_total", "op=delete,code=unknown"); got != 1 {
		t.Errorf("delete failures = %v, want 1", got)
	}
	if _, err := store.Instrument(open(t, "mem://instrumented2"), reg); err != nil {
		t.Errorf("second Instrument on the same registry: %v", err)
	}
}

// counter returns the value of the series of name whose labels, joined as
// "k=v,k=v" in exposition order, equal labels.
func counter(t *testing.T, reg *prometheus.Registry, name, labels string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(parts)
			want := strings.Split(labels, ",")
			slices.Sort(want)
			if slices.Equal(parts, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestPutIfAbsentAcrossProcesses races OS processes (re-executions of this
// test binary) for the same keys on file://: exactly one wins each key.
func TestPutIfAbsentAcrossProcesses(t *testing.T) {
	if os.Getenv("LANCED_STORE_RACE_DIR") != "" {
		t.Skip("child process")
	}
	dir := t.TempDir()
	const procs, keys = 6, 25
	goFile := filepath.Join(dir, "go")
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*strings.Builder, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRaceChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LANCED_STORE_RACE_DIR="+dir, fmt.Sprintf("LANCED_STORE_RACE_ID=%d", i), fmt.Sprintf("LANCED_STORE_RACE_KEYS=%d", keys))
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	time.Sleep(300 * time.Millisecond) // let the children reach the barrier
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wins := map[int][]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		for _, line := range strings.Split(outs[i].String(), "\n") {
			var k int
			if _, err := fmt.Sscanf(line, "WON %d", &k); err == nil {
				wins[k] = append(wins[k], i)
			}
		}
	}
	b := open(t, dir)
	for k := range keys {
		if len(wins[k]) != 1 {
			t.Errorf("key %d: winners %v, want exactly one", k, wins[k])
			continue
		}
		got, err := b.Get(context.Background(), fmt.Sprintf("_versions/%d.manifest", k))
		if err != nil || string(got) != fmt.Sprintf("proc-%d", wins[k][0]) {
			t.Errorf("key %d: content %q, %v; winner proc-%d", k, got, err, wins[k][0])
		}
	}
}

// TestRaceChild is the child half of TestPutIfAbsentAcrossProcesses.
func TestRaceChild(t *testing.T) {
	dir := os.Getenv("LANCED_STORE_RACE_DIR")
	if dir == "" {
		t.Skip("only runs as a child of TestPutIfAbsentAcrossProcesses")
	}
	var id, keys int
	fmt.Sscan(os.Getenv("LANCED_STORE_RACE_ID"), &id)
	fmt.Sscan(os.Getenv("LANCED_STORE_RACE_KEYS"), &keys)
	b, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no start signal")
		}
		time.Sleep(time.Millisecond)
	}
	for k := range keys {
		err := b.PutIfAbsent(context.Background(), fmt.Sprintf("_versions/%d.manifest", k), fmt.Appendf(nil, "proc-%d", id))
		switch {
		case err == nil:
			fmt.Printf("WON %d\n", k)
		case errors.Is(err, store.ErrPreconditionFailed):
		default:
			t.Fatalf("key %d: %v", k, err)
		}
	}
}

func TestConformanceGCS(t *testing.T) {
	runAtPrefixes(t, storetest.StartGCS(t).URI)
}

func TestGCSEndpointValidation(t *testing.T) {
	for _, uri := range []string{
		"gs://lance/t?endpoint=ftp://127.0.0.1:1&anonymous=true",
		"gs://lance/t?endpoint=127.0.0.1:1&anonymous=true",
		"gs://lance/t?endpoint=http://127.0.0.1:1&anonymous=true&bogus=1",
	} {
		if b, err := store.Open(context.Background(), uri); err == nil {
			b.Close()
			t.Errorf("Open(%s) succeeded", uri)
		} else if !strings.Contains(err.Error(), "endpoint") && !strings.Contains(err.Error(), "bogus") {
			t.Errorf("Open(%s): %v does not name the bad parameter", uri, err)
		}
	}
	gcs := storetest.StartGCS(t)
	// A trailing /storage/v1/ on the endpoint is accepted too.
	b := open(t, "gs://lance/t?anonymous=true&endpoint="+gcs.Endpoint+"/storage/v1/")
	if err := b.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := open(t, gcs.URI("t")).Get(context.Background(), "k"); err != nil || string(got) != "v" {
		t.Errorf("Get = %q, %v", got, err)
	}
}

// A listing must survive entries that vanish while it runs (a writer's
// temporary file, a file cleanup deletes): every stable key is listed, the
// vanished ones are skipped, nothing fails. On a local directory the
// listing reads the directory and then stats each entry, so a churning
// writer hits the window between the two.
func TestListSkipsVanishedEntries(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) *store.Bucket
	}{
		{"file", func(t *testing.T) *store.Bucket { return open(t, "file://"+t.TempDir()) }},
		{"mem", func(t *testing.T) *store.Bucket { return open(t, "mem://vanish-"+t.Name()) }},
		{"s3", func(t *testing.T) *store.Bucket { return open(t, storetest.StartS3(t).URI("tables/t.lance")) }},
		{"gcs", func(t *testing.T) *store.Bucket { return open(t, storetest.StartGCS(t).URI("tables/t.lance")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := tc.open(t)
			var stable []string
			for i := range 300 {
				k := fmt.Sprintf("_deletions/%04d-stable.arrow", i)
				stable = append(stable, k)
				if err := b.Put(ctx, k, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			stop := make(chan struct{})
			churned := make(chan int)
			go func() {
				n := 0
				defer func() { churned <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("_deletions/%04d-churn.arrow", n%300)
					_ = b.Put(ctx, k, []byte("y"))
					_ = b.Delete(ctx, k)
					n++
				}
			}()
			deadline := time.Now().Add(3 * time.Second)
			lists := 0
			for ; time.Now().Before(deadline) || lists < 20; lists++ {
				var got []string
				err := b.List(ctx, "_deletions/", func(o store.Object) error {
					if strings.HasSuffix(o.Key, "-stable.arrow") {
						got = append(got, o.Key)
					}
					return nil
				})
				if err != nil {
					close(stop)
					<-churned
					t.Fatalf("listing %d under churn: %v", lists, err)
				}
				if !slices.Equal(got, stable) {
					close(stop)
					<-churned
					t.Fatalf("listing %d: %d stable keys, want %d", lists, len(got), len(stable))
				}
			}
			close(stop)
			if n := <-churned; n == 0 {
				t.Fatal("no churn happened")
			}
		})
	}
}

// A local path with '#' or '%' in it opens that directory: the characters
// are part of the path, not a URL fragment or escape.
func TestOpenLocalPathWithHashAndPercent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a#01", "b%20c")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Get(ctx, "k")
	if err != nil || string(got) != "v" {
		t.Fatalf("Get k under %s: %q, %v", dir, got, err)
	}
}

// A file:// listing gives the keys in key order across directories ("a-b"
// before "a/b"), skips attribute sidecars, and lists a sub-directory only
// when it holds a file, like a mem:// bucket holding the same objects.
func TestLocalListingMatchesMem(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fb := open(t, "file://"+dir)
	mb := open(t, "mem://local-listing-"+t.Name())
	for _, k := range []string{"d/a-b", "d/a/b", "d/a/c/e", "d/z", "dz"} {
		for _, b := range []*store.Bucket{fb, mb} {
			if err := b.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "d", "empty", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "z.attrs"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := func(b *store.Bucket, oneLevel bool, prefix string) []string {
		var got []string
		fn := func(o store.Object) error {
			if !o.IsDir && o.Size != int64(len(o.Key)) {
				t.Errorf("%s: size %d, want %d", o.Key, o.Size, len(o.Key))
			}
			got = append(got, o.Key)
			return nil
		}
		var err error
		if oneLevel {
			err = b.ListDir(ctx, prefix, fn)
		} else {
			err = b.List(ctx, prefix, fn)
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		oneLevel bool
		prefix   string
		want     []string
	}{
		{false, "", []string{"d/a-b", "d/a/b", "d/a/c/e", "d/z", "dz"}},
		{false, "d/a", []string{"d/a-b", "d/a/b", "d/a/c/e"}},
		{false, "nothing/", nil},
		{true, "", []string{"d/", "dz"}},
		{true, "d", []string{"d/a-b", "d/a/", "d/z"}},
		{true, "d/a/", []string{"d/a/b", "d/a/c/"}},
	} {
		got, mem := list(fb, tc.oneLevel, tc.prefix), list(mb, tc.oneLevel, tc.prefix)
		if !slices.Equal(got, tc.want) || !slices.Equal(mem, tc.want) {
			t.Errorf("list(oneLevel=%v, %q): file %q, mem %q, want %q", tc.oneLevel, tc.prefix, got, mem, tc.want)
		}
	}
}

// TestFilePutIfMatchTakesAClaimLeftByADeadWriter: a file:// PutIfMatch
// whose writer died between claiming the generation and releasing the
// claim leaves the claim file; the next writer of that generation takes
// it over (its process is gone) instead of failing for ever, while a
// claim of a live process makes it fail with ErrPreconditionFailed.
func TestFilePutIfMatchTakesAClaimLeftByADeadWriter(t *testing.T) {
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	ctx := context.Background()
	if err := b.Put(ctx, "rec.json", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	_, gen, err := b.GetWithGeneration(ctx, "rec.json")
	if err != nil {
		t.Fatal(err)
	}
	claim := filepath.Join(dir, ".rec.json.cas-"+string(gen)+store.TempSuffix)
	if err := os.WriteFile(claim, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v2"), gen); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch under a live writer's claim = %v, want ErrPreconditionFailed", err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("no process to outlive: %v", err)
	}
	if err := os.WriteFile(claim, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v2"), gen); err != nil {
		t.Fatalf("PutIfMatch under a dead writer's claim: %v", err)
	}
	if got, _ := b.Get(ctx, "rec.json"); string(got) != "v2" {
		t.Fatalf("Get = %q, want v2", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the directory: %v, want rec.json only", ents)
	}
}
