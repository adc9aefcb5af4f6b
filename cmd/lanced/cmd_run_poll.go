package main

import (
	"context"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/watch"
)

// rootPoller is the daemon's poll sweep over its table roots: at start and
// every interval it lists each root (a table, or a directory of *.lance
// tables) and announces every table's latest version. It stands in for
// internal/watch's poll source until that lands; it shares watch's Sink.
type rootPoller struct {
	roots    []string
	interval time.Duration
	log      *slog.Logger
}

func (p *rootPoller) Run(ctx context.Context, sink watch.Sink) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.sweep(ctx, sink)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *rootPoller) sweep(ctx context.Context, sink watch.Sink) {
	for _, root := range p.roots {
		tables, err := discoverTables(ctx, root)
		if err != nil {
			p.log.Warn("poll root", "root", root, "err", err)
			continue
		}
		for _, tb := range tables {
			if ctx.Err() != nil {
				return
			}
			b, err := store.Open(ctx, tb)
			if err != nil {
				p.log.Warn("poll table", "table", tb, "err", err)
				continue
			}
			v, _, err := latestManifest(ctx, b)
			_ = b.Close()
			if err != nil {
				p.log.Debug("poll table", "table", tb, "err", err)
				continue
			}
			if err := sink(ctx, format.VersionRef{Table: tb, Version: v}); err != nil && ctx.Err() == nil {
				p.log.Warn("announce table", "table", tb, "version", v, "err", err)
			}
		}
	}
}

// discoverTables returns the root itself when it is a table (*.lance),
// else the *.lance directories directly under it.
func discoverTables(ctx context.Context, root string) ([]string, error) {
	base, query, _ := strings.Cut(root, "?")
	if strings.HasSuffix(base, ".lance") {
		return []string{root}, nil
	}
	b, err := store.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	var out []string
	err = b.ListDir(ctx, "", func(o store.Object) error {
		name := path.Base(strings.TrimSuffix(o.Key, "/"))
		if o.IsDir && strings.HasSuffix(name, ".lance") {
			u := strings.TrimSuffix(base, "/") + "/" + name
			if query != "" {
				u += "?" + query
			}
			out = append(out, u)
		}
		return nil
	})
	return out, err
}
