package lancewrite

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// fieldsAndNames returns schema's lance fields and its top-level column
// names.
func fieldsAndNames(t testing.TB, schema *arrow.Schema) ([]*filepb.Field, []string) {
	t.Helper()
	fields, err := FieldsFromArrow(schema, 0)
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, f := range schema.Fields() {
		top = append(top, f.Name)
	}
	return fields, top
}

// writeMem writes recs (projected to the given top-level columns) into an
// in-memory file and returns it as a copy source.
func writeMem(t testing.TB, all []*filepb.Field, top []string, recs []arrow.RecordBatch, opts Options) CopySource {
	t.Helper()
	keep := map[int32]bool{}
	var fields []*filepb.Field
	for _, f := range all {
		if f.ParentId < 0 {
			for _, n := range top {
				if f.Name == n {
					keep[f.Id] = true
				}
			}
		} else if keep[f.ParentId] {
			keep[f.Id] = true
		}
		if keep[f.Id] {
			fields = append(fields, f)
		}
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, fields, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		var cols []arrow.Array
		var fs []arrow.Field
		for _, n := range top {
			idx := r.Schema().FieldIndices(n)[0]
			cols = append(cols, r.Column(idx))
			fs = append(fs, r.Schema().Field(idx))
		}
		pr := array.NewRecordBatch(arrow.NewSchema(fs, nil), cols, r.NumRows())
		if err := w.Write(pr); err != nil {
			t.Fatal(err)
		}
		pr.Release()
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return CopySource{R: bytes.NewReader(buf.Bytes()), Size: int64(buf.Len()), Name: "mem-" + top[0],
		File: &tablepb.DataFile{Fields: res.Fields, ColumnIndices: res.ColumnIndices, FileMajorVersion: res.Major, FileMinorVersion: res.Minor}}
}

func readBack(t testing.TB, b []byte) arrow.Table {
	t.Helper()
	f, err := lancefile.Open(bytes.NewReader(b), int64(len(b)), "out.lance")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := f.ReadAll(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	return array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
}

func TestCopyColumnsAndConcatRows(t *testing.T) {
	for _, v := range []Version{V2_1, V2_0} {
		t.Run(v.String(), func(t *testing.T) {
			schema := testSchema(true)
			all, err := FieldsFromArrow(schema, 0)
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Version: v, PageBytes: 8 << 10}
			recs := randomRecords(schema, 5, 2, 600, 0.2, v != V2_0)
			want := array.NewTableFromRecords(schema, recs)
			defer want.Release()
			var names []string
			for _, f := range schema.Fields() {
				names = append(names, f.Name)
			}
			// split the columns over three files, give them in a scrambled order
			a := writeMem(t, all, names[:5], recs, opts)
			b := writeMem(t, all, names[5:12], recs, opts)
			c := writeMem(t, all, names[12:], recs, opts)
			var out bytes.Buffer
			res, err := CopyColumns(context.Background(), &out, []CopySource{c, a, b}, all)
			if err != nil {
				t.Fatal(err)
			}
			if res.Size != int64(out.Len()) || res.NumRows != 1200 {
				t.Fatalf("result %+v, wrote %d bytes", res, out.Len())
			}
			if d := oracle.Diff(want, readBack(t, out.Bytes())); d != "" {
				t.Fatalf("column merge: %s", d)
			}
			// row-wise: the same rows as three files concatenated
			var parts []CopySource
			for _, r := range recs {
				half := r.NewSlice(0, 250)
				rest := r.NewSlice(250, r.NumRows())
				parts = append(parts, writeMem(t, all, names, []arrow.RecordBatch{half}, opts), writeMem(t, all, names, []arrow.RecordBatch{rest}, opts))
				half.Release()
				rest.Release()
			}
			var cat bytes.Buffer
			res, err = ConcatRows(context.Background(), &cat, parts...)
			if err != nil {
				t.Fatal(err)
			}
			if res.NumRows != 1200 || !equalInts(res.Fields, parts[0].File.Fields) {
				t.Fatalf("concat result %+v", res)
			}
			if d := oracle.Diff(want, readBack(t, cat.Bytes())); d != "" {
				t.Fatalf("concat: %s", d)
			}
		})
	}
}

func TestCopyRefusals(t *testing.T) {
	schema := testSchema(true)
	all, _ := FieldsFromArrow(schema, 0)
	recs := randomRecords(schema, 7, 1, 100, 0.1, true)
	a := writeMem(t, all, []string{"id", "i8"}, recs, Options{})
	b := writeMem(t, all, []string{"s"}, recs, Options{})
	ctx := context.Background()
	var sink bytes.Buffer
	sub := func(names ...string) []*filepb.Field {
		var out []*filepb.Field
		for _, f := range all {
			for _, n := range names {
				if f.Name == n && f.ParentId < 0 {
					out = append(out, f)
				}
			}
		}
		return out
	}
	// a field no source holds
	if _, err := CopyColumns(ctx, &sink, []CopySource{a, b}, sub("id", "i8", "s", "f32")); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("missing column: %v", err)
	}
	// a field in two sources
	if _, err := CopyColumns(ctx, &sink, []CopySource{a, a}, sub("id")); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("duplicate column: %v", err)
	}
	// different row counts
	short := writeMem(t, all, []string{"s"}, []arrow.RecordBatch{recs[0].NewSlice(0, 50)}, Options{})
	if _, err := CopyColumns(ctx, &sink, []CopySource{a, short}, sub("id", "i8", "s")); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("row counts: %v", err)
	}
	// mixed versions
	old := writeMem(t, all, []string{"s"}, recs, Options{Version: V2_0})
	if _, err := CopyColumns(ctx, &sink, []CopySource{a, old}, sub("id", "i8", "s")); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("mixed versions: %v", err)
	}
	// row-wise with different columns
	if _, err := ConcatRows(ctx, &sink, a, b); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("concat of different columns: %v", err)
	}
	// blob fields
	blob := cloneFields(sub("bin"))
	blob[0].Metadata = map[string][]byte{"lance-encoding:blob": []byte("true")}
	// (the writer stores it as ordinary binary; the copy must still refuse it)
	bb := writeMemFields(t, blob, recs[0].Column(schema.FieldIndices("bin")[0]))
	if _, err := ConcatRows(ctx, &sink, bb, bb); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("blob: %v", err)
	}
	// corrupt input: an ordinary error, not "unsupported"
	raw := make([]byte, a.Size)
	if _, err := a.R.ReadAt(raw, 0); err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-2] ^= 0xff // magic
	bad := CopySource{R: bytes.NewReader(raw), Size: int64(len(raw)), Name: "bad.lance", File: a.File}
	_, err := CopyColumns(ctx, &sink, []CopySource{bad, b}, sub("id", "i8", "s"))
	if err == nil || errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("corrupt input: %v", err)
	}
	// truncated page data: ordinary error naming the file
	cut := CopySource{R: bytes.NewReader(raw[:0]), Size: a.Size, Name: "cut.lance", File: a.File}
	if _, err := CopyColumns(ctx, &sink, []CopySource{cut, b}, sub("id", "i8", "s")); err == nil || errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("truncated input: %v", err)
	}
	// a DataFile mapping pointing past the columns
	wrong := a
	wrong.File = &tablepb.DataFile{Fields: []int32{0}, ColumnIndices: []int32{7}}
	if _, err := CopyColumns(ctx, &sink, []CopySource{wrong}, sub("id")); err == nil || errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("bad mapping: %v", err)
	}
}

func cloneFields(fs []*filepb.Field) []*filepb.Field {
	out := make([]*filepb.Field, len(fs))
	for i, f := range fs {
		out[i] = &filepb.Field{Name: f.Name, Id: f.Id, ParentId: f.ParentId, LogicalType: f.LogicalType, Nullable: f.Nullable}
	}
	return out
}

func writeMemFields(t testing.TB, fields []*filepb.Field, col arrow.Array) CopySource {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, fields, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: fields[0].Name, Type: col.DataType(), Nullable: true}}, nil), []arrow.Array{col}, int64(col.Len()))
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return CopySource{R: bytes.NewReader(buf.Bytes()), Size: int64(buf.Len()), Name: "blob.lance",
		File: &tablepb.DataFile{Fields: res.Fields, ColumnIndices: res.ColumnIndices}}
}

// Sources are opened several at a time; a failure is reported for the
// first failing source in order, as a one-by-one open would, and every
// opened source is in its place.
func TestOpenSourcesInOrder(t *testing.T) {
	schema := testSchema(true)
	fields, top := fieldsAndNames(t, schema)
	var cs []CopySource
	for i := range 3 * openSourceWorkers {
		cs = append(cs, writeMem(t, fields, top, randomRecords(schema, uint64(i), 1, 50+i, 0.1, true), Options{}))
	}
	ss, err := openSources(cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range ss {
		if s.Name != cs[i].Name || s.f.NumRows() != uint64(50+i) {
			t.Fatalf("source %d: got %s with %d rows, want %s with %d", i, s.Name, s.f.NumRows(), cs[i].Name, 50+i)
		}
	}
	bad := slices.Clone(cs)
	bad[len(bad)-2].R = nil
	bad[len(bad)-2].Name = "late.lance"
	bad[5].R = nil
	bad[5].Name = "early.lance"
	if _, err := openSources(bad); err == nil || !strings.Contains(err.Error(), "source 5 (early.lance)") {
		t.Fatalf("want source 5's error, got %v", err)
	}
}
