package store

import (
	"path"
	"strings"
	"testing"
)

// FuzzCheckKey: a key that passes validation never escapes the root.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/abs", "a//b", "a/./b", "_versions/1.manifest", "a/..", "..", ".", "a\\b", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if checkKey(key) != nil {
			return
		}
		clean := path.Clean("/root/" + key)
		if !strings.HasPrefix(clean, "/root/") || clean != "/root/"+key {
			t.Fatalf("accepted key %q resolves to %q", key, clean)
		}
	})
}
