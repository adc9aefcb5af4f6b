package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/store"
)

// Run is the conformance suite for a store backend. open must return a bucket
// whose root is empty; it is called once per subtest.
func Run(t *testing.T, open func(t *testing.T) *store.Bucket) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, b *store.Bucket)
	}{
		{"PutGetAttributes", testPutGetAttributes},
		{"NotFound", testNotFound},
		{"GetRange", testGetRange},
		{"ReaderAt", testReaderAt},
		{"List", testList},
		{"ListManyKeys", testListManyKeys},
		{"Delete", testDelete},
		{"DeleteMany", testDeleteMany},
		{"StreamingWriter", testStreamingWriter},
		{"NoPartialObjects", testNoPartialObjects},
		{"NoSidecars", testNoSidecars},
		{"InvalidKeys", testInvalidKeys},
		{"Sub", testSub},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"PutIfMatch", testPutIfMatch},
		{"PutIfMatchRace", testPutIfMatchRace},
		{"PutIfMatchCounter", testPutIfMatchCounter},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, open(t)) })
	}
}

func testPutGetAttributes(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	data := []byte("hello, lance")
	mustPut(t, b, "a/b.txt", data)
	got, err := b.Get(ctx, "a/b.txt")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get = %q, %v; want %q", got, err, data)
	}
	a, err := b.Attributes(ctx, "a/b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != int64(len(data)) {
		t.Errorf("Attributes.Size = %d, want %d", a.Size, len(data))
	}
	if a.ModTime.Before(before) || a.ModTime.After(time.Now().Add(time.Minute)) {
		t.Errorf("Attributes.ModTime = %v, not around now", a.ModTime)
	}
	mustPut(t, b, "a/b.txt", []byte("v2"))
	if got, _ := b.Get(ctx, "a/b.txt"); string(got) != "v2" {
		t.Errorf("after overwrite Get = %q, want v2", got)
	}
	mustPut(t, b, "empty", nil)
	if got, err := b.Get(ctx, "empty"); err != nil || len(got) != 0 {
		t.Errorf("empty object: Get = %q, %v", got, err)
	}
}

func testNotFound(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	_, err := b.Get(ctx, "missing")
	wantCode(t, "Get", err, store.NotFound)
	_, err = b.Attributes(ctx, "dir/missing")
	wantCode(t, "Attributes", err, store.NotFound)
	_, err = b.GetRange(ctx, "missing", 0, 10)
	wantCode(t, "GetRange", err, store.NotFound)
	_, err = b.OpenReaderAt(ctx, "missing")
	wantCode(t, "OpenReaderAt", err, store.NotFound)
	wantCode(t, "Delete", b.Delete(ctx, "missing"), store.NotFound)
	n := 0
	if err := b.List(ctx, "nothing/", func(store.Object) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("List of a missing prefix = %d objects, %v; want 0, nil", n, err)
	}
}

func testGetRange(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	data := pattern(1000)
	mustPut(t, b, "r", data)
	for _, c := range []struct{ off, n int64 }{{0, 10}, {10, -1}, {990, 10}, {500, 1}, {0, -1}, {999, -1}} {
		rc, err := b.GetRange(ctx, "r", c.off, c.n)
		if err != nil {
			t.Fatalf("GetRange(%d,%d): %v", c.off, c.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		end := int64(len(data))
		if c.n >= 0 {
			end = c.off + c.n
		}
		if err != nil || !bytes.Equal(got, data[c.off:end]) {
			t.Errorf("GetRange(%d,%d) = %d bytes, %v; want data[%d:%d]", c.off, c.n, len(got), err, c.off, end)
		}
	}
}

func testReaderAt(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	data := pattern(4096)
	mustPut(t, b, "f", data)
	r, err := b.OpenReaderAt(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != 4096 {
		t.Errorf("Size = %d, want 4096", r.Size())
	}
	p := make([]byte, 100)
	for _, off := range []int64{0, 1, 3000, 3996} {
		n, err := r.ReadAt(p, off)
		if n != 100 || err != nil || !bytes.Equal(p, data[off:off+100]) {
			t.Errorf("ReadAt(%d) = %d, %v", off, n, err)
		}
	}
	n, err := r.ReadAt(p, 4050)
	if n != 46 || err != io.EOF || !bytes.Equal(p[:n], data[4050:]) {
		t.Errorf("ReadAt past the end = %d, %v; want 46, io.EOF", n, err)
	}
	if n, err := r.ReadAt(p, 5000); n != 0 || err != io.EOF {
		t.Errorf("ReadAt beyond the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func testList(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	for _, k := range []string{"x/1", "x/2/3", "x/2/4", "y", "xz"} {
		mustPut(t, b, k, []byte(k))
	}
	if got := listKeys(t, b, "x/", false); !slices.Equal(got, []string{"x/1", "x/2/3", "x/2/4"}) {
		t.Errorf("List(x/) = %v", got)
	}
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"x/1", "x/2/3", "x/2/4", "xz", "y"}) {
		t.Errorf("List() = %v", got)
	}
	if got := listKeys(t, b, "x/", true); !slices.Equal(got, []string{"x/1", "x/2/"}) {
		t.Errorf("ListDir(x/) = %v", got)
	}
	if got := listKeys(t, b, "x", true); !slices.Equal(got, []string{"x/1", "x/2/"}) {
		t.Errorf("ListDir(x) = %v", got)
	}
	if got := listKeys(t, b, "", true); !slices.Equal(got, []string{"x/", "xz", "y"}) {
		t.Errorf("ListDir() = %v", got)
	}
	err := b.List(ctx, "", func(o store.Object) error {
		if o.Key == "x/2/3" && (o.Size != 5 || o.ModTime.IsZero()) {
			return fmt.Errorf("object %+v: want size 5 and a ModTime", o)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	stop := errors.New("stop")
	n := 0
	if err := b.List(ctx, "", func(store.Object) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("List with a failing callback = %v after %d calls; want stop after 1", err, n)
	}
}

// testListManyKeys lists more keys than one listing page holds on S3 and GCS
// (1000), in two directories, so every backend's pagination is exercised.
func testListManyKeys(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	const n = 1100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			dir := "many/a/"
			if i%3 == 0 {
				dir = "many/b/"
			}
			if err := b.Put(ctx, fmt.Sprintf("%s%05d", dir, i), []byte("x")); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	keys := listKeys(t, b, "many/", false)
	if distinct := len(slices.Compact(slices.Clone(keys))); len(keys) != n || distinct != n {
		t.Fatalf("List(many/) = %d keys (%d distinct), want %d", len(keys), distinct, n)
	}
	if got := listKeys(t, b, "many/a/", true); len(got) != n-(n+2)/3 {
		t.Errorf("ListDir(many/a/) = %d keys, want %d", len(got), n-(n+2)/3)
	}
	if got := listKeys(t, b, "many/", true); !slices.Equal(got, []string{"many/a/", "many/b/"}) {
		t.Errorf("ListDir(many/) = %v", got)
	}
}

func testDelete(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	mustPut(t, b, "d/1", []byte("1"))
	mustPut(t, b, "d/2", []byte("2"))
	if err := b.Delete(ctx, "d/1"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Get(ctx, "d/1")
	wantCode(t, "Get after Delete", err, store.NotFound)
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"d/2"}) {
		t.Errorf("List after Delete = %v", got)
	}
}

func testDeleteMany(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	for _, k := range []string{"m/1", "m/2", "m/3", "m/4", "m/5"} {
		mustPut(t, b, k, []byte(k))
	}
	if err := b.DeleteMany(ctx, []string{"m/1", "m/3", "m/5", "m/missing"}); err != nil {
		t.Fatalf("DeleteMany: %v", err)
	}
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"m/2", "m/4"}) {
		t.Errorf("after DeleteMany: %v", got)
	}
	err := b.DeleteMany(ctx, []string{"m/2", "../escape"})
	wantInvalid(t, "DeleteMany", "../escape", err)
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"m/2", "m/4"}) {
		t.Errorf("a DeleteMany with an invalid key deleted something: %v", got)
	}
	if err := b.DeleteMany(ctx, nil); err != nil {
		t.Errorf("empty DeleteMany: %v", err)
	}
}

func testStreamingWriter(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	data := pattern(6 << 20) // over S3's 5 MiB multipart threshold
	w, err := b.NewWriter(ctx, "big/obj")
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := w.Write(data[off : off+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	_, err = b.Attributes(ctx, "big/obj")
	wantCode(t, "Attributes before Close", err, store.NotFound)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, "big/obj")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after streaming = %d bytes, %v", len(got), err)
	}
}

func testNoPartialObjects(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	w, err := b.NewWriter(cctx, "p/cancelled")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern(1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Close(); err == nil {
		t.Error("Close after a cancelled context succeeded")
	}
	_, err = b.Attributes(ctx, "p/cancelled")
	wantCode(t, "cancelled write", err, store.NotFound)

	w, err = b.NewWriter(ctx, "p/aborted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern(1000)); err != nil {
		t.Fatal(err)
	}
	aw, ok := w.(store.Writer)
	if !ok {
		t.Fatalf("NewWriter result %T does not implement store.Writer", w)
	}
	if err := aw.Abort(); err != nil {
		t.Error(err)
	}
	_, err = b.Attributes(ctx, "p/aborted")
	wantCode(t, "aborted write", err, store.NotFound)
	if got := listKeys(t, b, "", false); len(got) != 0 {
		t.Errorf("objects left by failed writes: %v", got)
	}
}

func testNoSidecars(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	mustPut(t, b, "_versions/1.manifest", []byte("m"))
	if err := b.PutIfAbsent(ctx, "_versions/2.manifest", []byte("m")); err != nil {
		t.Fatal(err)
	}
	_ = b.PutIfAbsent(ctx, "_versions/2.manifest", []byte("x"))
	w, _ := b.NewWriter(ctx, "data/a.lance")
	_, _ = w.Write([]byte("d"))
	_ = w.Close()
	want := []string{"_versions/1.manifest", "_versions/2.manifest", "data/a.lance"}
	if got := listKeys(t, b, "", false); !slices.Equal(got, want) {
		t.Errorf("List = %v, want exactly %v", got, want)
	}
}

func testInvalidKeys(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	for _, k := range []string{"", "/abs", "../x", "a/../../b", "a/..", "a//b", "./a", "a/./b", "a\x00b", "a/", `a\..\b`} {
		_, err := b.Get(ctx, k)
		wantInvalid(t, "Get", k, err)
		wantInvalid(t, "Put", k, b.Put(ctx, k, []byte("x")))
		wantInvalid(t, "PutIfAbsent", k, b.PutIfAbsent(ctx, k, []byte("x")))
		wantInvalid(t, "Delete", k, b.Delete(ctx, k))
		_, err = b.NewWriter(ctx, k)
		wantInvalid(t, "NewWriter", k, err)
	}
	for _, p := range []string{"../", "/", "a/../../"} {
		wantInvalid(t, "List", p, b.List(ctx, p, func(store.Object) error { return nil }))
	}
	if got := listKeys(t, b, "", false); len(got) != 0 {
		t.Errorf("invalid keys wrote objects: %v", got)
	}
}

func testSub(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	s := b.Sub("t1.lance")
	mustPut(t, s, "_versions/1.manifest", []byte("m"))
	if got, err := b.Get(ctx, "t1.lance/_versions/1.manifest"); err != nil || string(got) != "m" {
		t.Errorf("parent Get of a Sub's key = %q, %v", got, err)
	}
	if got := listKeys(t, s, "", false); !slices.Equal(got, []string{"_versions/1.manifest"}) {
		t.Errorf("Sub List = %v", got)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Sub Close: %v", err)
	}
	if _, err := b.Get(ctx, "t1.lance/_versions/1.manifest"); err != nil {
		t.Errorf("parent unusable after closing a Sub: %v", err)
	}
	_, err := s.Sub("..").Get(ctx, "x")
	if !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("Sub(..).Get = %v, want ErrInvalidKey", err)
	}
}

func testPutIfAbsent(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	if err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("second"))
	if !errors.Is(err, store.ErrPreconditionFailed) || store.CodeOf(err) != store.PreconditionFailed {
		t.Errorf("second PutIfAbsent = %v (code %v), want ErrPreconditionFailed", err, store.CodeOf(err))
	}
	if got, _ := b.Get(ctx, "_versions/1.manifest"); string(got) != "first" {
		t.Errorf("content after a lost PutIfAbsent = %q, want first", got)
	}
}

func testPutIfAbsentRace(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	for round := range raceRounds {
		key := fmt.Sprintf("_versions/%d.manifest", round)
		race(t, b, round, key, func(g int) error {
			return b.PutIfAbsent(ctx, key, fmt.Appendf(nil, "round-%d-writer-%d", round, g))
		})
	}
	if got := listKeys(t, b, "", false); len(got) != raceRounds {
		t.Errorf("after the races List = %v, want %d manifests", got, raceRounds)
	}
}

// raceRounds and raceWriters size the conditional-write races.
const raceRounds, raceWriters = 10, 16

// race starts raceWriters writers at once, writer g running write(g),
// which writes "round-<round>-writer-<g>" under key; exactly one must
// succeed, the others fail with ErrPreconditionFailed, and key must hold
// the winner's content.
func race(t *testing.T, b *store.Bucket, round int, key string, write func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, raceWriters)
	start := make(chan struct{})
	for g := range raceWriters {
		wg.Go(func() {
			<-start
			errs[g] = write(g)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for g, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("round %d: writers %d and %d both won", round, winner, g)
			}
			winner = g
		case !errors.Is(err, store.ErrPreconditionFailed):
			t.Fatalf("round %d: writer %d: %v, want ErrPreconditionFailed", round, g, err)
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: nobody won", round)
	}
	if got, _ := b.Get(context.Background(), key); string(got) != fmt.Sprintf("round-%d-writer-%d", round, winner) {
		t.Fatalf("round %d: content %q, winner was %d", round, got, winner)
	}
}

func testPutIfMatch(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	mustPut(t, b, "rec.json", []byte("v1"))
	data, g1, err := b.GetWithGeneration(ctx, "rec.json")
	if err != nil || string(data) != "v1" || g1 == "" {
		t.Fatalf("GetWithGeneration = %q, %q, %v", data, g1, err)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v2"), g1); err != nil {
		t.Fatalf("PutIfMatch of the generation read: %v", err)
	}
	if got, _ := b.Get(ctx, "rec.json"); string(got) != "v2" {
		t.Fatalf("after PutIfMatch Get = %q, want v2", got)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v3"), g1); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch of a replaced generation = %v, want ErrPreconditionFailed", err)
	}
	data, g2, err := b.GetWithGeneration(ctx, "rec.json")
	if err != nil || string(data) != "v2" || g2 == g1 {
		t.Fatalf("GetWithGeneration after the replacement = %q, %q (before %q), %v", data, g2, g1, err)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v3"), g2); err != nil {
		t.Fatalf("PutIfMatch of the new generation: %v", err)
	}
	if got, _ := b.Get(ctx, "rec.json"); string(got) != "v3" {
		t.Fatalf("Get = %q, want v3", got)
	}
	if err := b.PutIfMatch(ctx, "missing.json", []byte("x"), g2); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch of a missing key = %v, want ErrPreconditionFailed", err)
	}
	if _, err := b.Get(ctx, "missing.json"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutIfMatch of a missing key created it: %v", err)
	}
	if err := b.PutIfMatch(ctx, "rec.json", []byte("v4"), ""); err == nil || errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch without a generation = %v, want an error saying what to do", err)
	}
	_, _, err = b.GetWithGeneration(ctx, "missing.json")
	wantCode(t, "GetWithGeneration", err, store.NotFound)
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"rec.json"}) {
		t.Errorf("List = %v, want only rec.json (no claim or temp files)", got)
	}
}

// testPutIfMatchRace: writers that all read one generation race to
// replace it; exactly one wins each round and its content is stored.
func testPutIfMatchRace(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	mustPut(t, b, "rec.json", []byte("start"))
	for round := range raceRounds {
		_, gen, err := b.GetWithGeneration(ctx, "rec.json")
		if err != nil {
			t.Fatal(err)
		}
		race(t, b, round, "rec.json", func(g int) error {
			return b.PutIfMatch(ctx, "rec.json", fmt.Appendf(nil, "round-%d-writer-%d", round, g), gen)
		})
	}
	if got := listKeys(t, b, "", false); !slices.Equal(got, []string{"rec.json"}) {
		t.Errorf("after the races List = %v, want only rec.json", got)
	}
}

// testPutIfMatchCounter: writers increment one counter object by
// read, add, PutIfMatch, and again on a mismatch; no increment is lost.
// Each write names its writer and increment: PutIfMatch, like
// PutIfAbsent, takes an object holding exactly its data after an
// ambiguous answer for its own write.
func testPutIfMatchCounter(t *testing.T, b *store.Bucket) {
	ctx := context.Background()
	const writers, each = 8, 10
	mustPut(t, b, "counter", []byte("0 start"))
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				for attempt := 0; ; attempt++ {
					data, gen, err := b.GetWithGeneration(ctx, "counter")
					if err != nil {
						errs[w] = err
						return
					}
					var n int
					if _, err := fmt.Sscan(string(data), &n); err != nil {
						errs[w] = fmt.Errorf("counter %q: %w", data, err)
						return
					}
					err = b.PutIfMatch(ctx, "counter", fmt.Appendf(nil, "%d %d-%d", n+1, w, i), gen)
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrPreconditionFailed) || attempt > 10*writers*each {
						errs[w] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Get(ctx, "counter")
	var n int
	if _, err := fmt.Sscan(string(got), &n); err != nil || n != writers*each {
		t.Fatalf("counter = %q after %d increments", got, writers*each)
	}
}

func pattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i/251)
	}
	return p
}

func mustPut(t *testing.T, b *store.Bucket, key string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
}

func listKeys(t *testing.T, b *store.Bucket, prefix string, dir bool) []string {
	t.Helper()
	var keys []string
	fn := func(o store.Object) error {
		if o.IsDir != (dir && len(o.Key) > 0 && o.Key[len(o.Key)-1] == '/') {
			return fmt.Errorf("object %q: IsDir = %v", o.Key, o.IsDir)
		}
		keys = append(keys, o.Key)
		return nil
	}
	var err error
	if dir {
		err = b.ListDir(context.Background(), prefix, fn)
	} else {
		err = b.List(context.Background(), prefix, fn)
	}
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	slices.Sort(keys)
	return keys
}

func wantCode(t *testing.T, what string, err error, code store.ErrorCode) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, code)
		return
	}
	if store.CodeOf(err) != code {
		t.Errorf("%s: %v has code %v, want %v", what, err, store.CodeOf(err), code)
	}
	if code == store.NotFound && !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: errors.Is(%v, ErrNotFound) = false", what, err)
	}
}

func wantInvalid(t *testing.T, op, key string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("%s(%q) = %v, want ErrInvalidKey", op, key, err)
	}
}
