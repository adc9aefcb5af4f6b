package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
)

func init() {
	register(&command{
		name:    "history",
		summary: "list a table's versions: operation, who wrote it (lanced or a writer), rows and fragments changed",
		usage:   "lanced history URI [--limit N] [--json]",
		run:     runHistory,
	})
}

// historyEntry is one version of `lanced history`.
type historyEntry struct {
	Version   uint64    `json:"version"`
	Timestamp time.Time `json:"timestamp"`
	Operation string    `json:"operation"`
	// Writer is the library that wrote the manifest ("lanced" or a Lance
	// writer such as "lance"); ByLanced is Writer == "lanced".
	Writer        string `json:"writer"`
	WriterVersion string `json:"writer_version"`
	ByLanced      bool   `json:"by_lanced"`
	Fragments     int    `json:"fragments"`
	Rows          uint64 `json:"rows"`
	// FragmentsChanged and RowsChanged are the differences to the previous
	// version kept (0 for the oldest listed).
	FragmentsChanged int    `json:"fragments_changed"`
	RowsChanged      int64  `json:"rows_changed"`
	Tag              string `json:"tag,omitempty"`
}

func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 20, "newest N versions (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() { printUsage(stderr, commands["history"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	b, tbl, err := openTable(ctx, arg)
	if err != nil {
		return err
	}
	defer b.Close()
	vs, err := tbl.Versions(ctx)
	if err != nil {
		return err
	}
	slices.SortFunc(vs, func(a, b table.VersionInfo) int { return cmp.Compare(a.Version, b.Version) })
	if *limit > 0 && len(vs) > *limit+1 {
		vs = vs[len(vs)-*limit-1:] // one more, for the first entry's change
	}
	tags, _ := tbl.Tags(ctx)
	tagOf := map[uint64]string{}
	for name, tg := range tags {
		tagOf[tg.Version] = name
	}
	var out []historyEntry
	var prev *historyEntry
	for i, v := range vs {
		m, err := tbl.Load(ctx, v.Version)
		if err != nil {
			return err
		}
		st := format.ComputeLayoutStats(m.PB)
		e := historyEntry{Version: v.Version, Operation: "-", Writer: m.PB.GetWriterVersion().GetLibrary(),
			WriterVersion: m.PB.GetWriterVersion().GetVersion(), Fragments: st.Totals.Fragments, Rows: st.Totals.Rows, Tag: tagOf[v.Version]}
		e.ByLanced = e.Writer == table.WriterLibrary
		if ts := m.PB.GetTimestamp(); ts != nil {
			e.Timestamp = ts.AsTime().UTC()
		}
		if txn, err := tbl.LoadTransaction(ctx, m); err == nil {
			e.Operation = format.OperationName(txn)
		}
		if prev != nil {
			e.FragmentsChanged = e.Fragments - prev.Fragments
			e.RowsChanged = int64(e.Rows) - int64(prev.Rows)
		}
		prev = &e
		if *limit > 0 && i == 0 && len(vs) > *limit {
			continue // only read for the next entry's change
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTIMESTAMP\tOPERATION\tWRITTEN BY\tFRAGMENTS\tΔ\tROWS\tΔ\tTAG")
	for _, e := range out {
		by := dashIfEmpty(e.Writer) + " " + e.WriterVersion
		if !e.ByLanced {
			by = "writer (" + by + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%+d\t%d\t%+d\t%s\n", e.Version, e.Timestamp.Format(time.RFC3339), e.Operation, by,
			e.Fragments, e.FragmentsChanged, e.Rows, e.RowsChanged, e.Tag)
	}
	return tw.Flush()
}
