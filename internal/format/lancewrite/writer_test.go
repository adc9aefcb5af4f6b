package lancewrite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Pages are flushed as a column's buffer fills: with 32 KiB pages and many
// batches, every column gets many pages and no page is much larger than
// the limit (memory is bounded by page size x columns, not by the file).
func TestPagesFlushedAsTheyFill(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "v", Type: arrow.FixedSizeListOf(64, arrow.PrimitiveTypes.Float32)},
	}, nil)
	const pageBytes = 32 << 10
	for _, v := range []Version{V2_1, V2_0} {
		t.Run(v.String(), func(t *testing.T) {
			fields, err := FieldsFromArrow(schema, 0)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			w, err := NewWriter(&buf, fields, Options{Version: v, PageBytes: pageBytes})
			if err != nil {
				t.Fatal(err)
			}
			rows := 0
			for b := 0; b < 40; b++ {
				rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
				for i := 0; i < 500; i++ {
					rb.Field(0).(*array.Int64Builder).Append(int64(rows))
					rb.Field(1).(*array.StringBuilder).Append("some text that does not compress away " + string(rune('a'+rows%26)))
					fl := rb.Field(2).(*array.FixedSizeListBuilder)
					fl.Append(true)
					for k := 0; k < 64; k++ {
						fl.ValueBuilder().(*array.Float32Builder).Append(float32(rows*k) * 0.37)
					}
					rows++
				}
				rec := rb.NewRecordBatch()
				if err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
				rb.Release()
			}
			res, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			f, err := lancefile.Open(bytes.NewReader(buf.Bytes()), res.Size, "pages.lance")
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range f.Columns {
				pages := c.Meta.GetPages()
				if len(pages) < 4 {
					t.Errorf("column %d: %d pages, want many", c.Index, len(pages))
				}
				for pi, p := range pages {
					var sz uint64
					for _, s := range p.GetBufferSizes() {
						sz += s
					}
					if sz > 3*pageBytes {
						t.Errorf("column %d page %d: %d bytes for a %d-byte page limit", c.Index, pi, sz, pageBytes)
					}
				}
			}
			got, err := f.ReadAll(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			if got.NumRows() != int64(rows) {
				t.Fatalf("read %d rows, wrote %d", got.NumRows(), rows)
			}
		})
	}
}

func TestWriterRefusesBadInput(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}, nil)
	fields, _ := FieldsFromArrow(schema, 0)
	w, err := NewWriter(io.Discard, fields, Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.BinaryTypes.String}}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, other)
	rb.Field(0).(*array.StringBuilder).Append("x")
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(rec); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("string into int32: %v", err)
	}
	two := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}, {Name: "b", Type: arrow.PrimitiveTypes.Int32}}, nil)
	rb2 := array.NewRecordBuilder(memory.DefaultAllocator, two)
	rec2 := rb2.NewRecordBatch()
	defer rec2.Release()
	if err := w.Write(rec2); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("two columns: %v", err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if err := w.Write(rec); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	// unsupported types and broken field lists
	if _, err := FieldsFromArrow(arrow.NewSchema([]arrow.Field{{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32)}}, nil), 0); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("map: %v", err)
	}
	for name, fs := range map[string][]*filepb.Field{
		"unknown logical type": {{Name: "x", Id: 0, ParentId: -1, LogicalType: "geometry"}},
		"orphan child":         {{Name: "x", Id: 1, ParentId: 7, LogicalType: "int32"}},
		"duplicate id":         {{Name: "x", Id: 0, ParentId: -1, LogicalType: "int32"}, {Name: "y", Id: 0, ParentId: -1, LogicalType: "int32"}},
		"empty list":           {{Name: "l", Id: 0, ParentId: -1, LogicalType: "list"}},
	} {
		if _, err := NewWriter(io.Discard, fs, Options{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewWriter(io.Discard, fields, Options{Version: 22}); err == nil {
		t.Error("version 2.2 accepted")
	}
}

// A file of zero rows is still a valid file.
func TestEmptyFile(t *testing.T) {
	schema := testSchema(true)
	fields, _ := FieldsFromArrow(schema, 0)
	for _, v := range []Version{V2_1, V2_0} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, fields, Options{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		f, err := lancefile.Open(bytes.NewReader(buf.Bytes()), res.Size, "empty.lance")
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if f.NumRows() != 0 {
			t.Fatalf("%s: %d rows", v, f.NumRows())
		}
	}
}

// Global buffers added before, between and after batches are read back at
// the indices AddGlobalBuffer returned, 64-byte aligned, with the schema
// metadata set after writing.
func TestGlobalBuffers(t *testing.T) {
	schema := testSchema(true)
	fields, _ := FieldsFromArrow(schema, 0)
	recs := randomRecords(schema, 2, 1, 50, 0.2, true)
	for _, v := range []Version{V2_1, V2_0} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, fields, Options{Version: v, SchemaMetadata: map[string][]byte{"a": []byte("1")}})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]byte{[]byte("first"), bytes.Repeat([]byte{7}, 100), {}}
		add := func(b []byte, idx int) {
			got, err := w.AddGlobalBuffer(b)
			if err != nil || got != idx {
				t.Fatalf("%s: AddGlobalBuffer = %d, %v; want %d", v, got, err, idx)
			}
		}
		add(want[0], 1)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
			if len(recs) > 0 && r == recs[0] {
				add(want[1], 2)
			}
		}
		add(want[2], 3)
		w.SetSchemaMetadata("lance:ivf", []byte("1"))
		res, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		f, err := lancefile.Open(bytes.NewReader(buf.Bytes()), res.Size, "gb.lance")
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if len(f.GlobalBuffers) != 4 {
			t.Fatalf("%s: %d global buffers, want 4", v, len(f.GlobalBuffers))
		}
		for i, b := range want {
			gb := f.GlobalBuffers[i+1]
			got, err := f.ReadBuffer(gb)
			if err != nil || !bytes.Equal(got, b) || gb.Offset%64 != 0 {
				t.Fatalf("%s: global buffer %d at %d = %q, %v; want %q", v, i+1, gb.Offset, got, err, b)
			}
		}
		md := f.Descriptor.GetSchema().GetMetadata()
		if string(md["a"]) != "1" || string(md["lance:ivf"]) != "1" {
			t.Fatalf("%s: schema metadata %q", v, md)
		}
		rec, err := f.ReadAll(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if rec.NumRows() != int64(res.NumRows) {
			t.Fatalf("%s: read %d rows, wrote %d", v, rec.NumRows(), res.NumRows)
		}
		rec.Release()
	}
}

// Corrupt copy inputs give errors, never panics.
func FuzzCopyCorruptInput(f *testing.F) {
	schema := testSchema(true)
	all, _ := FieldsFromArrow(schema, 0)
	recs := randomRecords(schema, 3, 1, 50, 0.2, true)
	for _, v := range []Version{V2_1, V2_0} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, all, Options{Version: v})
		if err != nil {
			f.Fatal(err)
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				f.Fatal(err)
			}
		}
		if _, err := w.Close(); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes(), uint32(buf.Len()-30), byte(1), v == V2_0)  // footer
		f.Add(buf.Bytes(), uint32(100), byte(0x80), v == V2_0)        // page data
		f.Add(buf.Bytes(), uint32(buf.Len()-200), byte(7), v == V2_0) // metadata
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint32, x byte, v20 bool) {
		if len(data) == 0 {
			return
		}
		b := append([]byte(nil), data...)
		b[int(at)%len(b)] ^= x
		version := V2_1
		if v20 {
			version = V2_0
		}
		var fieldIDs, cols []int32
		ci := int32(0)
		for _, fl := range all {
			if version == V2_0 || !(fl.LogicalType == "struct" || fl.LogicalType == "list" || fl.LogicalType == "list.struct") {
				fieldIDs = append(fieldIDs, fl.Id)
				cols = append(cols, ci)
				ci++
			}
		}
		src := CopySource{R: bytes.NewReader(b), Size: int64(len(b)), Name: "fuzz.lance", File: &tablepb.DataFile{Fields: fieldIDs, ColumnIndices: cols}}
		_, _ = CopyColumns(context.Background(), io.Discard, []CopySource{src}, all)
		_, _ = ConcatRows(context.Background(), io.Discard, src, src)
	})
}
