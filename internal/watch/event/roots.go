package event

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/lanced-dev/lanced/internal/format"
)

// Reasons an ObjectEvent does not become a VersionRef. Roots.Ref returns an
// error wrapping exactly one of them; DropReason maps it to a metric label.
var (
	// ErrNotCreated: the event is not an object creation (a delete, a
	// metadata update, a restore).
	ErrNotCreated = errors.New("not an object-created event")
	// ErrNotManifest: the key is not a committed manifest directly under a
	// _versions/ directory (data, transaction and deletion files, detached
	// d{v}.manifest versions, staging and temporary names, the version
	// hint).
	ErrNotManifest = errors.New("not a committed manifest key")
	// ErrUnsafeKey: the key could steer a consumer out of its root (a "."
	// or ".." segment, an empty segment, a leading '/', '%', '\\', '?',
	// '#', control characters, invalid UTF-8) and is never acted on.
	ErrUnsafeKey = errors.New("unsafe object key")
	// ErrOutsideRoots: the table is not under any allow-listed root.
	ErrOutsideRoots = errors.New("table outside the allow-listed roots")
	// ErrBranch: the manifest belongs to a branch (…/x.lance/tree/…) or to
	// LanceDB's __manifest namespace table; lanced maintains main branches
	// of user tables only.
	ErrBranch = errors.New("branch or namespace manifest")
)

// DropReason is the metric label for a Roots.Ref error.
func DropReason(err error) string {
	switch {
	case errors.Is(err, ErrNotCreated):
		return "not_created"
	case errors.Is(err, ErrNotManifest):
		return "not_manifest"
	case errors.Is(err, ErrUnsafeKey):
		return "unsafe_key"
	case errors.Is(err, ErrOutsideRoots):
		return "outside_roots"
	case errors.Is(err, ErrBranch):
		return "branch"
	default:
		return "other"
	}
}

// reservedSegments may not appear in a table's key: they are Lance's own
// directories inside a table, so a key holding one is not a table root.
var reservedSegments = map[string]bool{
	"_versions": true, "_transactions": true, "_deletions": true, "_indices": true, "_refs": true,
}

// Root is one allow-listed location: a table root or a directory holding
// tables.
type Root struct {
	// Scheme is "s3", "gs" or "file".
	Scheme string
	// Bucket is the bucket name ("" for file).
	Bucket string
	// Prefix is the key prefix without leading or trailing '/' ("" allows
	// the whole bucket); for file URIs the absolute path without its
	// leading '/'.
	Prefix string
	// Query is the connection query of the configured URI (endpoint,
	// region, ...), kept for opening tables; it plays no part in matching.
	Query string
}

// URI returns the root as a URI (no trailing slash).
func (r Root) URI() string { return joinURI(r.Scheme, r.Bucket, r.Prefix) }

// contains reports whether the table at key (scheme and bucket already
// matched) lies inside the root: equal to the prefix or below it at a '/'
// boundary, so "tables" never admits "tables2".
func (r Root) contains(scheme, bucket, key string) bool {
	if scheme != r.Scheme || bucket != r.Bucket {
		return false
	}
	return r.Prefix == "" || key == r.Prefix || strings.HasPrefix(key, r.Prefix+"/")
}

func joinURI(scheme, bucket, key string) string {
	if key == "" {
		return scheme + "://" + bucket
	}
	return scheme + "://" + bucket + "/" + key
}

// Roots is the allow-list: only tables under one of these become
// VersionRefs.
type Roots struct {
	roots []Root
}

// ParseRoots parses allow-listed root URIs: s3://bucket[/prefix],
// gs://bucket[/prefix] or file:///abs/path, optionally with a connection
// query (kept in Root.Query, see OpenURI). A root is either a table root
// or a directory of tables. Roots are held to the same rules as event keys
// (no "." or ".." segments, no empty segments, no '%').
func ParseRoots(uris ...string) (*Roots, error) {
	rs := &Roots{}
	for _, s := range uris {
		r, err := ParseRoot(s)
		if err != nil {
			return nil, err
		}
		rs.roots = append(rs.roots, r)
	}
	return rs, nil
}

// ParseRoot parses one root URI (see ParseRoots).
func ParseRoot(s string) (Root, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Root{}, fmt.Errorf("parse root %q: %w", s, err)
	}
	if u.Fragment != "" || u.User != nil {
		return Root{}, fmt.Errorf("root %q: fragment and user info are not allowed", s)
	}
	var r Root
	switch u.Scheme {
	case SchemeS3, SchemeGCS:
		if u.Host == "" {
			return Root{}, fmt.Errorf("root %q: no bucket", s)
		}
		r = Root{Scheme: u.Scheme, Bucket: u.Host}
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return Root{}, fmt.Errorf("root %q: want file:///absolute/path", s)
		}
		r = Root{Scheme: "file"}
	default:
		return Root{}, fmt.Errorf("root %q: scheme %q (want s3, gs or file)", s, u.Scheme)
	}
	if u.RawPath != "" {
		return Root{}, fmt.Errorf("root %q: escaped characters in the path: %w", s, ErrUnsafeKey)
	}
	prefix := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return Root{}, fmt.Errorf("root %q: %w", s, err)
		}
	}
	if r.Scheme == "file" && prefix == "" {
		return Root{}, fmt.Errorf("root %q: the file system root is not a table root", s)
	}
	r.Prefix = prefix
	r.Query = u.RawQuery
	return r, nil
}

// OpenURI returns table (a VersionRef.Table) with the connection query of
// the most specific root containing it appended, ready for store.Open;
// table itself when that root has no query or none contains it.
func (rs *Roots) OpenURI(table string) string {
	t, err := ParseRoot(table)
	if err != nil || t.Query != "" {
		return table
	}
	best := -1
	for i, r := range rs.roots {
		if r.contains(t.Scheme, t.Bucket, t.Prefix) && (best < 0 || len(r.Prefix) > len(rs.roots[best].Prefix)) {
			best = i
		}
	}
	if best < 0 || rs.roots[best].Query == "" {
		return table
	}
	return table + "?" + rs.roots[best].Query
}

// NewRoots builds an allow-list from parsed roots.
func NewRoots(roots ...Root) *Roots { return &Roots{roots: append([]Root(nil), roots...)} }

// List returns the roots.
func (rs *Roots) List() []Root { return append([]Root(nil), rs.roots...) }

// Len is the number of roots.
func (rs *Roots) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.roots)
}

// checkKey rejects keys that could escape a root once joined into a URI
// or path.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("empty key: %w", ErrUnsafeKey)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("key is not valid UTF-8: %w", ErrUnsafeKey)
	}
	if key[0] == '/' {
		return fmt.Errorf("key %q starts with '/': %w", key, ErrUnsafeKey)
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("key %q holds a control character: %w", key, ErrUnsafeKey)
		case c == '%' || c == '\\' || c == '?' || c == '#':
			return fmt.Errorf("key %q holds %q: %w", key, c, ErrUnsafeKey)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("key %q has an empty segment: %w", key, ErrUnsafeKey)
		case ".", "..":
			return fmt.Errorf("key %q has a %q segment: %w", key, seg, ErrUnsafeKey)
		}
	}
	return nil
}

// Ref maps an object event to the table version it announces, or returns
// an error wrapping one of ErrNotCreated, ErrUnsafeKey, ErrNotManifest,
// ErrBranch, ErrOutsideRoots. The table is the key's prefix before
// "/_versions/<name>", so a key names its own table and nothing else; the
// table must lie inside an allow-listed root of the same scheme and bucket.
func (rs *Roots) Ref(ev ObjectEvent) (format.VersionRef, error) {
	if !ev.Created {
		return format.VersionRef{}, fmt.Errorf("%s: %w", ev.URI(), ErrNotCreated)
	}
	return rs.RefForKey(ev.Scheme, ev.Bucket, ev.Key)
}

// RefForKey is Ref for a created object at scheme://bucket/key (the poll
// source lists keys instead of receiving events).
func (rs *Roots) RefForKey(scheme, bucket, key string) (format.VersionRef, error) {
	if err := checkKey(key); err != nil {
		return format.VersionRef{}, err
	}
	if bucket == "" && scheme != "file" || strings.ContainsAny(bucket, "/%\\?#@:") {
		return format.VersionRef{}, fmt.Errorf("bucket %q: %w", bucket, ErrUnsafeKey)
	}
	dir, name := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir, name = key[:i], key[i+1:]
	}
	var table string
	switch {
	case dir == format.VersionsDir:
		table = ""
	case strings.HasSuffix(dir, "/"+format.VersionsDir):
		table = strings.TrimSuffix(dir, "/"+format.VersionsDir)
	default:
		return format.VersionRef{}, fmt.Errorf("%s: %w", key, ErrNotManifest)
	}
	version, _, err := format.ParseManifestName(name)
	if err != nil || version == 0 {
		return format.VersionRef{}, fmt.Errorf("%s: %w", key, ErrNotManifest)
	}
	if table != "" {
		segs := strings.Split(table, "/")
		for i, seg := range segs {
			if reservedSegments[seg] {
				return format.VersionRef{}, fmt.Errorf("%s: table key holds %q: %w", key, seg, ErrNotManifest)
			}
			if seg == "tree" && i > 0 && strings.HasSuffix(segs[i-1], ".lance") {
				return format.VersionRef{}, fmt.Errorf("%s: %w", key, ErrBranch)
			}
		}
		if segs[len(segs)-1] == "__manifest" {
			return format.VersionRef{}, fmt.Errorf("%s: %w", key, ErrBranch)
		}
	}
	for _, r := range rs.roots {
		if r.contains(scheme, bucket, table) {
			return format.VersionRef{Table: joinURI(scheme, bucket, table), Version: version}, nil
		}
	}
	return format.VersionRef{}, fmt.Errorf("%s: %w", joinURI(scheme, bucket, table), ErrOutsideRoots)
}
