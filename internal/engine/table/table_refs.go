package table

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/lanced-dev/lanced/internal/store"
)

// Tag is a _refs/tags/{name}.json file (camelCase JSON, lance 8.0.0).
type Tag struct {
	Name         string          `json:"-"`
	Branch       *string         `json:"branch"`
	Version      uint64          `json:"version"`
	ManifestSize uint64          `json:"manifestSize"`
	CreatedAt    string          `json:"createdAt,omitempty"`
	UpdatedAt    string          `json:"updatedAt,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// Branch is a _refs/branches/{name}.json file; '/' in a name is stored as %2F.
type Branch struct {
	Name          string          `json:"-"`
	ParentBranch  *string         `json:"parentBranch"`
	ParentVersion uint64          `json:"parentVersion"`
	CreateAt      json.RawMessage `json:"createAt,omitempty"`
	ManifestSize  uint64          `json:"manifestSize"`
	Identifier    json.RawMessage `json:"identifier,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

const (
	tagsDir     = "_refs/tags/"
	branchesDir = "_refs/branches/"
)

// Tags reads every tag, keyed by name.
func (t *Table) Tags(ctx context.Context) (map[string]Tag, error) {
	out := map[string]Tag{}
	err := t.readRefs(ctx, tagsDir, func(name string, data []byte) error {
		var tag Tag
		if err := json.Unmarshal(data, &tag); err != nil {
			return err
		}
		tag.Name = name
		out[name] = tag
		return nil
	})
	return out, err
}

// Branches reads every branch, keyed by name (with '/' restored).
func (t *Table) Branches(ctx context.Context) (map[string]Branch, error) {
	out := map[string]Branch{}
	err := t.readRefs(ctx, branchesDir, func(name string, data []byte) error {
		var br Branch
		if err := json.Unmarshal(data, &br); err != nil {
			return err
		}
		br.Name = name
		out[name] = br
		return nil
	})
	return out, err
}

func (t *Table) readRefs(ctx context.Context, dir string, fn func(name string, data []byte) error) error {
	var keys []string
	err := t.b.ListDir(ctx, dir, func(o store.Object) error {
		if !o.IsDir && strings.HasSuffix(o.Key, ".json") {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s of %s: %w", dir, t.b.URI(), err)
	}
	for _, key := range keys {
		data, err := t.b.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		name := strings.TrimSuffix(key[strings.LastIndexByte(key, '/')+1:], ".json")
		if un, err := url.PathUnescape(name); err == nil {
			name = un
		}
		if err := fn(name, data); err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
	}
	return nil
}
