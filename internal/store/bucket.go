package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // gs:// URLs
	"gocloud.dev/blob/memblob"
)

// Object is one listed object. Key is relative to the bucket root; for
// ListDir sub-prefixes IsDir is true and Key ends with '/'.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
	IsDir   bool
}

// Attrs are an object's attributes.
type Attrs struct {
	Size    int64
	ModTime time.Time
}

// ReaderAt reads an object at random offsets (ranged GETs underneath).
type ReaderAt interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// Bucket is an object store rooted at a URI prefix: a table root or a
// directory of tables. It is safe for concurrent use.
type Bucket struct {
	uri      *url.URL     // canonical URI of this root (query kept for s3/gs)
	bkt      *blob.Bucket // shared, rooted at the store root
	prefix   string       // "" or "a/b/": this root inside bkt
	localDir string       // file:// only: absolute directory of bkt's root
	owner    bool         // Close closes bkt
	metrics  *metrics
	fault    func(op, key string) error
	retry    *Retry // nil: DefaultRetry
}

var (
	memMu      sync.Mutex
	memBuckets = map[string]*blob.Bucket{}
)

// Open opens a bucket rooted at uri:
//   - file:///abs/path or a local path, absolute or relative to the working
//     directory (the directory must exist);
//   - mem://name/prefix (process-wide: every Open of the same name sees the
//     same objects);
//   - s3://bucket/prefix?endpoint=...&region=...&use_path_style=true&... (the
//     query is gocloud.dev's s3blob URL parameters);
//   - gs://bucket/prefix?… (gocloud.dev's gcsblob URL parameters, plus
//     endpoint=http(s)://host:port for an emulator or other JSON-API
//     endpoint; see openGCS).
func Open(ctx context.Context, uri string) (*Bucket, error) {
	if strings.TrimSpace(uri) == "" {
		return nil, errors.New("store: open: empty URI: give a local path, file:///abs/path, s3://bucket/path or gs://bucket/path")
	}
	uri = LocalURI(uri)
	u, err := url.Parse(uri)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("store: open %s: %w", CanonicalURI(uri), err)
	}
	switch u.Scheme {
	case "file":
		return openFile(u)
	case "mem":
		name := u.Host
		if name == "" {
			return nil, fmt.Errorf("store: open %s: mem:// needs a name", CanonicalURI(uri))
		}
		prefix := strings.Trim(u.Path, "/")
		if err := checkPrefix(prefix); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", CanonicalURI(uri), err)
		}
		memMu.Lock()
		bkt, ok := memBuckets[name]
		if !ok {
			bkt = memblob.OpenBucket(nil)
			memBuckets[name] = bkt
		}
		memMu.Unlock()
		b := &Bucket{uri: &url.URL{Scheme: "mem", Host: name}, bkt: bkt}
		if prefix != "" {
			b.prefix = prefix + "/"
			b.uri = withPath(b.uri, prefix)
		}
		return b, nil
	case "s3", "gs":
		if u.Host == "" {
			return nil, fmt.Errorf("store: open %s: no bucket name", CanonicalURI(uri))
		}
		prefix := strings.Trim(u.Path, "/")
		if err := checkPrefix(prefix); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", CanonicalURI(uri), err)
		}
		root := &url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: u.RawQuery}
		var bkt *blob.Bucket
		if u.Scheme == "gs" {
			bkt, err = openGCS(ctx, root)
		} else {
			bkt, err = openS3(ctx, root)
		}
		if err != nil {
			return nil, openError(uri, root, err)
		}
		b := &Bucket{uri: root, bkt: bkt, owner: true}
		if prefix != "" {
			b.prefix = prefix + "/"
			b.uri = withPath(root, prefix)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("store: open %s: unsupported scheme %q (want file, mem, s3 or gs)", CanonicalURI(uri), u.Scheme)
	}
}

// openError is Open's error for an s3/gs root that did not open: advice
// when the cause is a known misconfiguration, and never the URI's query
// string (the opener's own message may quote the whole URL).
func openError(uri string, root *url.URL, err error) error {
	if a := advise(uri, err); a != "" {
		return fmt.Errorf("store: open %s: %s", CanonicalURI(uri), a)
	}
	msg := strings.ReplaceAll(err.Error(), root.String(), CanonicalURI(root.String()))
	return fmt.Errorf("store: open %s: %s", CanonicalURI(uri), msg)
}

func openFile(u *url.URL) (*Bucket, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("store: open %s: file URI with a host; use file:///abs/path", u)
	}
	dir := u.Path
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("store: open %s: path is not absolute", u)
	}
	dir = filepath.Clean(dir)
	bkt, err := fileblob.OpenBucket(dir, &fileblob.Options{
		Metadata:  fileblob.MetadataDontWrite, // no .attrs sidecars in table directories
		NoTempDir: true,
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = noDirError{dir, err}
		}
		return nil, &Error{Op: "open", URI: "file://" + dir, Code: classify(err), Err: err}
	}
	return &Bucket{uri: &url.URL{Scheme: "file", Path: dir}, bkt: bkt, localDir: dir, owner: true}, nil
}

// noDirError is openFile's error for a directory that does not exist: it
// names the directory and what to check instead of the stat error.
type noDirError struct {
	dir string
	err error
}

func (e noDirError) Error() string {
	return fmt.Sprintf("directory %s does not exist: check the path (lanced opens existing tables and roots)", e.dir)
}

func (e noDirError) Unwrap() error { return e.err }

func withPath(u *url.URL, p string) *url.URL {
	c := *u
	c.Path = "/" + p
	if c.Scheme == "file" {
		c.Path = p
	}
	return &c
}

// URI returns the bucket's identity: its root URI without the connection
// query parameters or credentials (CanonicalURI), as logs, errors, task ids
// and metric labels show it.
func (b *Bucket) URI() string { return CanonicalURI(b.uri.String()) }

// Local says whether the bucket is a local directory (file://): its reads
// are system calls on local files, not requests over a network.
func (b *Bucket) Local() bool { return b.localDir != "" }

// ConnURI returns the root URI with its connection query parameters
// (endpoint, region, ...): Open(ConnURI()) opens the same root.
func (b *Bucket) ConnURI() string { return b.uri.String() }

// Sub returns a child root at prefix that shares b's connection. Close only
// the parent.
func (b *Bucket) Sub(prefix string) *Bucket {
	prefix = strings.Trim(prefix, "/")
	c := *b
	c.owner = false
	if prefix == "" {
		return &c
	}
	if err := checkPrefix(prefix); err != nil {
		// Keep the signature simple: a bad prefix yields a bucket whose every
		// operation fails with the validation error.
		c.fault = func(string, string) error { return err }
		return &c
	}
	c.prefix = b.prefix + prefix + "/"
	switch b.uri.Scheme {
	case "file":
		c.uri = withPath(b.uri, filepath.Join(b.uri.Path, filepath.FromSlash(prefix)))
	default:
		c.uri = withPath(b.uri, strings.TrimSuffix(c.prefix, "/"))
	}
	return &c
}

// Close releases the connection if b owns it (Open's result, not a Sub).
func (b *Bucket) Close() error {
	if !b.owner {
		return nil
	}
	if err := b.bkt.Close(); err != nil {
		return b.wrap("close", "", err)
	}
	return nil
}

// begin validates the key, applies injected faults and starts the metrics
// clock. The returned func finishes the operation and wraps its error.
func (b *Bucket) begin(op, key string, isPrefix bool) (func(error) error, error) {
	start := time.Now()
	var err error
	if isPrefix {
		err = checkPrefix(key)
	} else {
		err = checkKey(key)
	}
	if err == nil && b.fault != nil {
		err = b.fault(op, key)
	}
	finish := func(err error) error {
		if err != nil {
			err = b.wrap(op, key, err)
		}
		b.metrics.observe(op, start, err)
		return err
	}
	if err != nil {
		return nil, finish(err)
	}
	return finish, nil
}

func (b *Bucket) wrap(op, key string, err error) error {
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	return &Error{Op: op, URI: b.URI(), Key: key, Code: classify(err), Err: err}
}

// Get reads a whole object.
func (b *Bucket) Get(ctx context.Context, key string) (_ []byte, err error) {
	done, err := b.begin("get", key, false)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = b.retrying(ctx, "get", key, func() (err error) {
		data, err = b.bkt.ReadAll(ctx, b.prefix+key)
		return err
	})
	return data, done(err)
}

// GetRange streams length bytes of key from off (length < 0: to the end).
func (b *Bucket) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	done, err := b.begin("get_range", key, false)
	if err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, done(fmt.Errorf("negative offset %d", off))
	}
	var r *blob.Reader
	err = b.retrying(ctx, "get_range", key, func() (err error) {
		r, err = b.bkt.NewRangeReader(ctx, b.prefix+key, off, length, nil)
		return err
	})
	if err != nil {
		return nil, done(err)
	}
	end := int64(-1)
	if length >= 0 {
		// The reader knows the object's size: a range past it ends there.
		end = min(off+length, max(off, r.Size()))
	}
	return &resumingReader{ctx: ctx, b: b, key: key, off: off, end: end, r: r}, done(nil)
}

// Attributes returns an object's size and modification time.
func (b *Bucket) Attributes(ctx context.Context, key string) (Attrs, error) {
	done, err := b.begin("attributes", key, false)
	if err != nil {
		return Attrs{}, err
	}
	var a *blob.Attributes
	err = b.retrying(ctx, "attributes", key, func() (err error) {
		a, err = b.bkt.Attributes(ctx, b.prefix+key)
		return err
	})
	if err != nil {
		return Attrs{}, done(err)
	}
	return Attrs{Size: a.Size, ModTime: a.ModTime}, done(nil)
}

// List calls fn for every object under prefix, recursively (prefix is a
// plain string prefix of the key). An error from fn stops the listing and is
// returned as is.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(Object) error) error {
	return b.list(ctx, "list", prefix, "", fn)
}

// ListDir calls fn for the objects and sub-prefixes directly under the
// directory prefix ("" for the root; a missing trailing '/' is added).
// Sub-prefixes have IsDir set and a Key ending in '/'.
func (b *Bucket) ListDir(ctx context.Context, prefix string, fn func(Object) error) error {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return b.list(ctx, "list_dir", prefix, "/", fn)
}

// listRestarts bounds how often one listing restarts after an entry
// vanished under it.
const listRestarts = 16

func (b *Bucket) list(ctx context.Context, op, prefix, delim string, fn func(Object) error) error {
	done, err := b.begin(op, prefix, true)
	if err != nil {
		return err
	}
	// Listings come in key order. A local listing reads a directory, then
	// stats each entry; an entry removed in between (a writer's temporary
	// file, a file cleanup just deleted) fails the whole listing with "not
	// found". It is skipped instead: the listing restarts after the last
	// key delivered, as if the entry had gone before the listing began. A
	// transient failure (a throttled or failed page) restarts it the same
	// way, within the retry policy.
	if b.localDir != "" {
		err := b.listLocal(prefix, delim != "", fn)
		if fe, ok := err.(localListError); ok {
			return done(b.wrap(op, prefix, fe.err))
		}
		_ = done(nil) // nil, or fn's error: the listing itself succeeded
		return err
	}
	last, started := "", false
	failures := 0
	for restart := 0; ; restart++ {
		it := b.bkt.List(&blob.ListOptions{Prefix: b.prefix + prefix, Delimiter: delim})
		for {
			obj, err := it.Next(ctx)
			if err == io.EOF {
				return done(nil)
			}
			if err != nil {
				if classify(err) == NotFound && ctx.Err() == nil && restart < listRestarts {
					break
				}
				err = b.wrap(op, prefix, err)
				failures++
				if b.again(ctx, op, prefix, failures, err) {
					break
				}
				return done(err)
			}
			if obj.IsDir && delim == "" {
				continue
			}
			o := Object{Key: strings.TrimPrefix(obj.Key, b.prefix), Size: obj.Size, ModTime: obj.ModTime, IsDir: obj.IsDir}
			if started && o.Key <= last {
				continue // delivered before the restart
			}
			last, started = o.Key, true
			if err := fn(o); err != nil {
				_ = done(nil) // the listing itself succeeded
				return err
			}
		}
	}
}

// Put writes a whole object, replacing any previous one.
func (b *Bucket) Put(ctx context.Context, key string, data []byte) error {
	done, err := b.begin("put", key, false)
	if err != nil {
		return err
	}
	return done(b.retrying(ctx, "put", key, func() error { return b.write(ctx, key, data, writeCond{}) }))
}

// PutIfAbsent creates key with data only if no object exists under it,
// atomically across processes. It returns an error matching
// ErrPreconditionFailed if the key exists with other content. When the
// outcome is ambiguous (the response was lost, the client timed out, or
// the client's own retry of a landed request met the precondition), it
// reads the key back: holding exactly data means the create landed, and
// PutIfAbsent returns nil.
func (b *Bucket) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	done, err := b.begin("put_if_absent", key, false)
	if err != nil {
		return err
	}
	return done(b.putConditional(ctx, "put_if_absent", key, data, func() error {
		return b.write(ctx, key, data, writeCond{absent: true})
	}))
}

// putConditional runs a conditional write of data under key (write) until
// it settles: an ambiguous failure whose object holds exactly data is a
// success, a transient one is tried again, a 409 conflict with another
// conditional write in flight is asked again after a pause.
func (b *Bucket) putConditional(ctx context.Context, op, key string, data []byte, write func() error) error {
	const maxConflictRetries = 8
	delay := 20 * time.Millisecond
	failures := 0
	for attempt := 0; ; attempt++ {
		err := write()
		if err != nil && !isConditionalConflict(err) && b.landed(ctx, key, data) {
			// The write failed as far as the client can tell (a lost
			// response, a timeout, or a precondition failure on the
			// client's own retry of a request that had landed), yet the
			// object under key is exactly ours: the write succeeded.
			return nil
		}
		if err != nil && !isConditionalConflict(err) {
			// Not there (or it could not be read back): a transient
			// failure is tried again. The write stays conditional, so a
			// try that lands after an earlier one did meets the
			// precondition and the read-back above settles it.
			failures++
			if b.again(ctx, op, key, failures, b.wrap(op, key, err)) {
				continue
			}
		}
		if err == nil || !isConditionalConflict(err) || attempt >= maxConflictRetries {
			return err
		}
		// 409 ConditionalRequestConflict: another conditional write to the key
		// was in flight. Its outcome decides ours; ask again.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// landed reports whether key holds exactly data, reading it back after an
// ambiguous conditional create. A manifest's bytes name its own transaction
// file, so another writer's object never matches. The read-back outlives a
// cancelled ctx (a cancelled write may still have landed) and is retried a
// few times; if it cannot tell, landed is false and the write's error
// stands.
func (b *Bucket) landed(ctx context.Context, key string, data []byte) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	delay := 50 * time.Millisecond
	for range 4 {
		a, err := b.bkt.Attributes(rctx, b.prefix+key)
		if err == nil && a.Size != int64(len(data)) {
			return false
		}
		if err == nil {
			var got []byte
			got, err = b.bkt.ReadAll(rctx, b.prefix+key)
			if err == nil {
				return bytes.Equal(got, data)
			}
		}
		if classify(err) == NotFound {
			return false
		}
		select {
		case <-rctx.Done():
			return false
		case <-time.After(delay):
		}
		delay *= 2
	}
	return false
}

func (b *Bucket) write(ctx context.Context, key string, data []byte, cond writeCond) error {
	if b.localDir != "" {
		w, err := b.newLocalWriter(ctx, key, cond.absent)
		if err != nil {
			return err
		}
		w.match = cond.match
		if _, err := w.Write(data); err != nil {
			_ = w.Abort()
			return err
		}
		return w.Close()
	}
	if cond.match != "" {
		return b.writeIfMatch(ctx, key, data, cond.match)
	}
	return b.writeBlob(ctx, key, data, &blob.WriterOptions{IfNotExist: cond.absent})
}

// writeBlob writes data under key through gocloud.dev with opts.
func (b *Bucket) writeBlob(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts.ContentType = "application/octet-stream"
	if b.uri.Scheme == "gs" {
		// The data is in memory: one upload request, no 16 MiB chunk
		// buffer per write (the GCS client's default allocates and clears
		// one for every object, however small).
		opts.BufferSize = -1
	}
	w, err := b.bkt.NewWriter(wctx, b.prefix+key, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	return w.Close()
}

// Writer is what NewWriter returns: the object appears on a successful Close;
// Abort (or cancelling the context before Close) discards it.
type Writer interface {
	io.WriteCloser
	Abort() error
}

// NewWriter streams an object. It becomes visible only after a successful
// Close; on any error, Abort, or a cancelled ctx no object is left behind.
// The returned value implements Writer.
func (b *Bucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	done, err := b.begin("new_writer", key, false)
	if err != nil {
		return nil, err
	}
	if b.localDir != "" {
		w, err := b.newLocalWriter(ctx, key, false)
		if err != nil {
			return nil, done(err)
		}
		if DirectWrites() {
			w.staged = newStagedWriter(w.f)
		}
		w.abortWhenDropped()
		return &localErrWriter{errWriter{w: w, b: b, key: key}, w}, done(nil)
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := b.bkt.NewWriter(wctx, b.prefix+key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		cancel()
		return nil, done(err)
	}
	return &errWriter{w: &blobWriter{w: w, cancel: cancel}, b: b, key: key}, done(nil)
}

type blobWriter struct {
	w      *blob.Writer
	cancel context.CancelFunc
	failed bool
}

func (w *blobWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.failed = true
	}
	return n, err
}

func (w *blobWriter) Close() error {
	defer w.cancel()
	if w.failed {
		w.cancel() // a failed write must not publish a partial object
	}
	return w.w.Close()
}

func (w *blobWriter) Abort() error {
	w.cancel()
	_ = w.w.Close()
	return nil
}

// errWriter wraps a writer's errors as *Error and records metrics.
type errWriter struct {
	w interface {
		io.WriteCloser
		Abort() error
	}
	b      *Bucket
	key    string
	closed bool
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.closed {
		return 0, e.b.wrap("write", e.key, errors.New("writer already closed"))
	}
	n, err := e.w.Write(p)
	if err != nil {
		err = e.b.wrap("write", e.key, err)
	}
	return n, err
}

func (e *errWriter) Close() error {
	if e.closed {
		return e.b.wrap("write", e.key, errors.New("writer already closed"))
	}
	e.closed = true
	start := time.Now()
	err := e.w.Close()
	if err != nil {
		err = e.b.wrap("write", e.key, err)
	}
	e.b.metrics.observe("write_close", start, err)
	return err
}

// localErrWriter is a file:// writer: an errWriter that can also copy
// byte ranges of local files in the kernel (lancewrite.RangeWriter).
type localErrWriter struct {
	errWriter
	lw *localWriter
}

// CopyRange appends n bytes of src from off without them passing through
// this process when src is a local file; false (nothing written) when it
// cannot.
func (e *localErrWriter) CopyRange(src io.ReaderAt, off, n int64) (bool, error) {
	if e.closed {
		return false, e.b.wrap("write", e.key, errors.New("writer already closed"))
	}
	ok, err := e.lw.CopyRange(src, off, n)
	if err != nil {
		err = e.b.wrap("write", e.key, err)
	}
	return ok, err
}

// KernelCopies reports whether CopyRange copies in the kernel
// (copy_file_range(2) into the page cache) rather than into the writer's
// direct-write buffers.
func (e *localErrWriter) KernelCopies() bool { return e.lw.staged == nil }

func (e *errWriter) Abort() error {
	if e.closed {
		return nil
	}
	e.closed = true
	return e.w.Abort()
}

// Delete removes an object; a missing key is an error matching ErrNotFound.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	done, err := b.begin("delete", key, false)
	if err != nil {
		return err
	}
	attempt := 0
	return done(b.retrying(ctx, "delete", key, func() error {
		attempt++
		err := b.bkt.Delete(ctx, b.prefix+key)
		if attempt > 1 && classify(err) == NotFound {
			// An earlier try failed as far as the client saw, but the
			// object is gone: that try (or another deleter) removed it.
			return nil
		}
		return err
	}))
}
