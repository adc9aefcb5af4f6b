package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ScanOptions selects what ScanWith reads.
type ScanOptions struct {
	Version     uint64   // 0 = latest
	Columns     []string // nil = all
	WithRowID   bool     // adds _rowid (stable ids on stable-row-id tables, else the address)
	WithRowAddr bool     // adds _rowaddr (fragment id << 32 | offset)
	Where       string   // SQL filter; not with Take*
	TakeRowIDs  []uint64 // takeRowIds, in the order given
	TakeOffsets []uint64 // takeOffsets (logical row offsets), in the order given
}

// Scan returns real Lance's read of the table at version (0 = latest), in
// scan order (fragments in manifest order, rows by offset), projected to
// columns (nil = all). The table is released when the test ends.
func Scan(t testing.TB, uri string, version uint64, columns []string, opts ...Options) arrow.Table {
	t.Helper()
	return ScanWith(t, uri, ScanOptions{Version: version, Columns: columns}, opts...)
}

// ScanWith is Scan with row ids/addresses, a filter or random access.
func ScanWith(t testing.TB, uri string, so ScanOptions, opts ...Options) arrow.Table {
	t.Helper()
	Require(t)
	if so.Where != "" && (so.TakeRowIDs != nil || so.TakeOffsets != nil) {
		t.Fatalf("oracle: scan %s: Where cannot be combined with Take*", uri)
	}
	out := filepath.Join(t.TempDir(), "scan.arrow")
	cols := "*"
	if so.Columns != nil {
		cols = strings.Join(so.Columns, ",")
	}
	args := []string{nodeURI(uri), out, strconv.FormatUint(so.Version, 10), cols, optionsJSON(opts)}
	if so.WithRowID {
		args = append(args, "--with-rowid")
	}
	if so.WithRowAddr {
		args = append(args, "--with-rowaddr")
	}
	if so.Where != "" {
		args = append(args, "--where", so.Where)
	}
	if so.TakeRowIDs != nil {
		args = append(args, "--take-rowids", joinUints(so.TakeRowIDs))
	}
	if so.TakeOffsets != nil {
		args = append(args, "--take-offsets", joinUints(so.TakeOffsets))
	}
	stdout := run(t, "scan.mjs", args...)
	var meta struct {
		Rows int64 `json:"rows"`
	}
	if err := json.Unmarshal(stdout, &meta); err != nil {
		t.Fatalf("oracle: scan %s: decode %q: %v", uri, stdout, err)
	}
	tbl, err := readIPCFile(out)
	if err != nil {
		t.Fatalf("oracle: scan %s: %v", uri, err)
	}
	t.Cleanup(tbl.Release)
	if tbl.NumRows() != meta.Rows {
		t.Fatalf("oracle: scan %s: node wrote %d rows, arrow file holds %d", uri, meta.Rows, tbl.NumRows())
	}
	return tbl
}

func joinUints(v []uint64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// readIPCFile reads a whole Arrow IPC file into a Table.
func readIPCFile(path string) (arrow.Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ipc.NewFileReader(bytes.NewReader(b), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("read arrow file %s: %w", path, err)
	}
	defer r.Close()
	recs := make([]arrow.RecordBatch, 0, r.NumRecords())
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("read arrow file %s: batch %d: %w", path, i, err)
		}
		rec.Retain()
		recs = append(recs, rec)
	}
	return array.NewTableFromRecords(r.Schema(), recs), nil
}

// RowAddrsByID maps each live row's integer "id" to its row address at
// version v (0 = latest), as real Lance scans it.
func RowAddrsByID(t testing.TB, uri string, v uint64, opts ...Options) map[int64]uint64 {
	t.Helper()
	return idMap(t, "RowAddrsByID", uri, ScanOptions{Version: v, Columns: []string{"id"}, WithRowAddr: true}, "_rowaddr", opts...)
}

// RowIDsByID maps each live row's integer "id" to its row id at version v
// (0 = latest): the stable row id on a table with stable row ids, else
// the row address.
func RowIDsByID(t testing.TB, uri string, v uint64, opts ...Options) map[int64]uint64 {
	t.Helper()
	return idMap(t, "RowIDsByID", uri, ScanOptions{Version: v, Columns: []string{"id"}, WithRowID: true}, "_rowid", opts...)
}

// idMap scans so and maps each row's int64 "id" to its uint64 column col.
func idMap(t testing.TB, caller, uri string, so ScanOptions, col string, opts ...Options) map[int64]uint64 {
	t.Helper()
	tbl := ScanWith(t, uri, so, opts...)
	defer tbl.Release()
	out := map[int64]uint64{}
	tr := array.NewTableReader(tbl, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		var ids *array.Int64
		var vals *array.Uint64
		for i, f := range rec.Schema().Fields() {
			switch f.Name {
			case "id":
				ids, _ = rec.Column(i).(*array.Int64)
			case col:
				vals, _ = rec.Column(i).(*array.Uint64)
			}
		}
		if ids == nil || vals == nil {
			t.Fatalf("oracle: %s(%s): scan has no int64 id or %s column: %s", caller, uri, col, rec.Schema())
		}
		for i := 0; i < ids.Len(); i++ {
			out[ids.Value(i)] = vals.Value(i)
		}
	}
	return out
}
