package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/engine/scan"
)

func init() {
	register(&command{
		name:    "scan",
		usage:   "lanced scan URI [--version N] [--columns a,b] [--limit N]",
		summary: "print a table's live rows as JSON lines",
		run:     runScan,
	})
}

// errScanLimit stops the scan once --limit rows are printed.
var errScanLimit = errors.New("scan limit reached")

func runScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.Uint64("version", 0, "table version to read (default: latest)")
	columns := fs.String("columns", "", "comma-separated columns to print (dotted paths into structs allowed; default: all)")
	limit := fs.Uint64("limit", 0, "print at most N rows (0: all)")
	fs.Usage = func() { printUsage(stderr, commands["scan"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	b, t, err := openTable(ctx, arg)
	if err != nil {
		return err
	}
	defer b.Close()
	m, _, err := loadVersion(ctx, t, arg, *version)
	if err != nil {
		return err
	}
	var opts scan.ScanOptions
	if *columns != "" {
		names := strings.Split(*columns, ",")
		for i := range names {
			names[i] = strings.TrimSpace(names[i])
		}
		if opts.FieldIDs, err = scan.FieldIDsByName(m.PB.GetFields(), names); err != nil {
			return err
		}
	}
	w := bufio.NewWriter(stdout)
	printed := uint64(0)
	err = scan.ScanManifest(ctx, b, m, opts, func(rec arrow.RecordBatch) error {
		if *limit > 0 && printed+uint64(rec.NumRows()) > *limit {
			rec = rec.NewSlice(0, int64(*limit-printed))
			defer rec.Release()
		}
		if err := array.RecordToJSON(rec, w); err != nil {
			return err
		}
		printed += uint64(rec.NumRows())
		if *limit > 0 && printed >= *limit {
			return errScanLimit
		}
		return nil
	})
	if err != nil && !errors.Is(err, errScanLimit) {
		_ = w.Flush()
		return err
	}
	return w.Flush()
}
