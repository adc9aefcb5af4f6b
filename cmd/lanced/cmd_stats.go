package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/watch"
)

func init() {
	register(&command{
		name:    "stats",
		usage:   "lanced stats URI [--version N] [--json] [--files] [--policy DIR]",
		summary: "print a table's layout statistics (fragments, files, deletions)",
		run:     runStats,
	})
}

// statsReport is the --json output: the layout stats (version, fragments,
// totals at the top level) plus what the table is.
type statsReport struct {
	URI                string `json:"uri"`
	Naming             string `json:"naming"`
	LatestVersion      uint64 `json:"latest_version"`
	WriterLibrary      string `json:"writer_library"`
	WriterVersion      string `json:"writer_version"`
	DataFormat         string `json:"data_format"`
	ReaderFeatureFlags uint64 `json:"reader_feature_flags"`
	WriterFeatureFlags uint64 `json:"writer_feature_flags"`
	// Writable is false when lanced refuses to commit on this version.
	Writable bool   `json:"writable"`
	Refusal  string `json:"refusal,omitempty"`
	Indices  int    `json:"indices"`
	// IndexCoverage is every index's coverage of this version.
	IndexCoverage []index.Coverage `json:"index_coverage,omitempty"`
	// Quarantined are fragments lanced found corrupt and leaves alone.
	Quarantined []quarantine.Mark `json:"quarantined,omitempty"`
	// QuarantinedIndices are index segments lanced could not remap; the
	// fragments they cover are kept until the index is rebuilt.
	QuarantinedIndices []quarantine.IndexMark `json:"quarantined_indices,omitempty"`
	// Drift is each vector index's drift as lanced's catch-ups measured it
	// (package drift), with the policy's drift_threshold.
	Drift []indexDrift `json:"drift,omitempty"`
	format.LayoutStats
}

// indexDrift is one index's drift record and whether it passes the
// policy's drift_threshold.
type indexDrift struct {
	Index string `json:"index"`
	drift.Record
	Ratio     float64 `json:"ratio"`
	Threshold float64 `json:"threshold"`
	Retrain   bool    `json:"retrain_recommended"`
}

// parseAnyOrder parses flags that may come before or after positional
// arguments and returns the positional ones.
func parseAnyOrder(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// oneArg parses flags around exactly one positional argument (the table)
// and returns it; any other count prints the usage (exit status 2).
func oneArg(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", exitError{2}
	}
	return pos[0], nil
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.Uint64("version", 0, "table version (default: latest)")
	asJSON := fs.Bool("json", false, "print JSON")
	files := fs.Bool("files", false, "list every data file (human output)")
	policyDir := fs.String("policy", "", "policy directory, for the index drift_threshold (default: lanced's default and the table's config)")
	fs.Usage = func() { printUsage(stderr, commands["stats"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	set, err := loadPolicyDir(*policyDir, stderr)
	if err != nil {
		return err
	}
	b, t, err := openTable(ctx, arg)
	if err != nil {
		return err
	}
	defer b.Close()
	m, latest, err := loadVersion(ctx, t, arg, *version)
	if err != nil {
		return err
	}
	naming, err := t.Naming(ctx)
	if err != nil {
		return err
	}
	rep := statsReport{
		URI:                b.URI(),
		Naming:             naming.String(),
		LatestVersion:      latest,
		WriterLibrary:      m.PB.GetWriterVersion().GetLibrary(),
		WriterVersion:      m.PB.GetWriterVersion().GetVersion(),
		ReaderFeatureFlags: m.PB.GetReaderFeatureFlags(),
		WriterFeatureFlags: m.PB.GetWriterFeatureFlags(),
		Writable:           true,
		Indices:            len(m.Indices.GetIndices()),
		LayoutStats:        format.ComputeLayoutStats(m.PB),
	}
	if df := m.PB.GetDataFormat(); df != nil {
		rep.DataFormat = df.GetFileFormat() + " " + df.GetVersion()
	}
	if err := format.CheckWritable(m.PB); err != nil {
		rep.Writable, rep.Refusal = false, err.Error()
	}
	if rep.IndexCoverage, err = index.CoverageOf(m.PB.GetFragments(), m.Indices.GetIndices()); err != nil {
		return fmt.Errorf("stats of %s version %d: %w", b.URI(), m.Version(), err)
	}
	mk, err := loadMarks(ctx, b, m)
	if err != nil {
		return err
	}
	for _, f := range m.PB.GetFragments() {
		if fm, ok := mk.fragments[f.GetId()]; ok {
			rep.Quarantined = append(rep.Quarantined, fm)
		}
	}
	for _, ix := range m.Indices.GetIndices() {
		if im, ok := mk.indices[(&index.Segment{Meta: ix}).UUID()]; ok {
			rep.QuarantinedIndices = append(rep.QuarantinedIndices, im)
		}
	}
	thr := set.Resolve(store.CanonicalURI(arg), m.PB.GetConfig()).Index.DriftThreshold.Value
	for _, c := range rep.IndexCoverage {
		if r, ok := mk.drift[c.Name]; ok && r.Rows > 0 {
			rep.Drift = append(rep.Drift, indexDrift{Index: c.Name, Record: r, Ratio: r.Ratio(), Threshold: thr, Retrain: r.Ratio() > thr})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printStats(stdout, &rep, *files)
}

func printStats(w io.Writer, r *statsReport, files bool) error {
	fmt.Fprintf(w, "table    %s\n", r.URI)
	fmt.Fprintf(w, "version  %d of %d (%s naming), written by %s %s, data %s\n",
		r.Version, r.LatestVersion, r.Naming, dashIfEmpty(r.WriterLibrary), r.WriterVersion, dashIfEmpty(r.DataFormat))
	fmt.Fprintf(w, "flags    reader %d, writer %d; %d index segment(s)\n", r.ReaderFeatureFlags, r.WriterFeatureFlags, r.Indices)
	if !r.Writable {
		fmt.Fprintf(w, "READ ONLY: %s\n", r.Refusal)
	}
	if len(r.IndexCoverage) > 0 {
		fmt.Fprintln(w)
		iw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(iw, "index\ttype\tsegments\tindexed rows\tunindexed rows\tfragments\tunindexed fragments\tstale ids\treuse versions\t")
		for _, c := range r.IndexCoverage {
			note := ""
			if c.Lost {
				note = "  (covers nothing: real Lance drops it at its next write)"
			}
			if c.ReuseError != "" {
				note += "  (bitmaps as recorded: " + c.ReuseError + ")"
			}
			fmt.Fprintf(iw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", c.Name, c.Kind, c.Segments, c.IndexedRows, c.UnindexedRows, len(c.Fragments), len(c.Unindexed), c.Stale, c.ReuseVersions, note)
		}
		if err := iw.Flush(); err != nil {
			return err
		}
	}
	for _, mk := range r.Quarantined {
		fmt.Fprintf(w, "QUARANTINED fragment %d: %s\n", mk.Fragment, mk)
	}
	for _, mk := range r.QuarantinedIndices {
		fmt.Fprintf(w, "QUARANTINED %s\n", mk)
	}
	for _, d := range r.Drift {
		fmt.Fprintf(w, "drift    %s: %.1f%% (%d of %d caught-up row(s) far from every centroid)", d.Index, 100*d.Ratio, d.Far, d.Rows)
		if d.Retrain {
			fmt.Fprintf(w, ": drift %.1f%% > %g%%: retrain recommended (Lance's createIndex with replace)", 100*d.Ratio, 100*d.Threshold)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fragment\tphysical rows\tdeleted\trows\tdata files\tbytes\tdead slots\tdeletions\t")
	for _, f := range r.Fragments {
		var bytes uint64
		for _, df := range f.Files {
			bytes += df.SizeBytes
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%.0f%%\t%s\t\n", f.ID, f.PhysicalRows, f.DeletedRows,
			f.PhysicalRows-min(f.PhysicalRows, f.DeletedRows), f.DataFiles, bytes, 100*f.DeadSlotRatio, dashIfEmpty(f.DeletionFileKind))
	}
	fmt.Fprintf(tw, "total %d\t%d\t%d\t%d\t%d\t%d\t\t\t\n", r.Totals.Fragments, r.Totals.PhysicalRows, r.Totals.DeletedRows, r.Totals.Rows, r.Totals.DataFiles, r.Totals.DataFileBytes)
	if err := tw.Flush(); err != nil || !files {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fragment\tdata file\tbytes\tfields\tdead\tformat")
	for _, f := range r.Fragments {
		for _, df := range f.Files {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\n", f.ID, df.Path, df.SizeBytes, df.Fields, df.DeadFields, df.FileVersion)
		}
	}
	return tw.Flush()
}

// notATableHint turns "no manifest" on a directory of tables (a LanceDB
// database) into an error listing the tables inside.
// openTable opens the table a command names. A URI that is not a table
// but holds tables (a LanceDB directory) gets an error listing them. The
// caller closes the bucket.
func openTable(ctx context.Context, arg string) (*store.Bucket, *table.Table, error) {
	b, err := store.Open(ctx, arg)
	if err != nil {
		return nil, nil, err
	}
	t, err := table.OpenTable(ctx, b)
	if err != nil {
		b.Close()
		return nil, nil, notATableHint(ctx, arg, err)
	}
	return b, t, nil
}

// loadVersion reads version v of the table at arg (0: the latest) and
// returns it with the latest version; a version past the latest or cleaned
// up is an error that says which versions there are.
func loadVersion(ctx context.Context, t *table.Table, arg string, v uint64) (*format.Manifest, uint64, error) {
	latest, err := t.LatestVersion(ctx)
	if err != nil {
		return nil, 0, notATableHint(ctx, arg, err)
	}
	if v > latest {
		return nil, 0, fmt.Errorf("version %d not found (latest %d)", v, latest)
	}
	var m *format.Manifest
	if v == 0 {
		m, err = t.Latest(ctx)
	} else {
		m, err = t.Load(ctx, v)
		if errors.Is(err, store.ErrNotFound) {
			return nil, 0, fmt.Errorf("version %d not found (cleaned up; latest %d; lanced history %s lists the versions kept)", v, latest, store.CanonicalURI(arg))
		}
	}
	if err != nil {
		return nil, 0, err
	}
	return m, latest, nil
}

func notATableHint(ctx context.Context, arg string, err error) error {
	found, ferr := watch.FindTables(ctx, store.LocalURI(arg))
	if ferr != nil || len(found) == 0 || found[0].Table == store.CanonicalURI(arg) {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a table but holds %d table(s); pass one of them:", store.CanonicalURI(arg), len(found))
	for _, f := range found {
		b.WriteString("\n  " + f.Table)
	}
	return errors.New(b.String())
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
