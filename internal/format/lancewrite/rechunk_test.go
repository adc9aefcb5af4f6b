package lancewrite

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
)

// pageLayoutOf parses a page's layout.
func pageLayoutOf(t *testing.T, pg *file2pb.ColumnMetadata_Page) *enc21pb.PageLayout {
	t.Helper()
	a, err := lancefile.PageEncoding(pg.GetEncoding())
	if err != nil {
		t.Fatal(err)
	}
	var pl enc21pb.PageLayout
	if err := proto.Unmarshal(a.GetValue(), &pl); err != nil {
		t.Fatal(err)
	}
	return &pl
}

// encodingName names a page's structural layout and value compression,
// e.g. "mini-block/flat+def" or "mini-block/bitpacked+dict".
func encodingName(pl *enc21pb.PageLayout) string {
	var name, suffix string
	var c *enc21pb.CompressiveEncoding
	switch {
	case pl.GetMiniBlockLayout() != nil:
		mb := pl.GetMiniBlockLayout()
		name, c = "mini-block", mb.GetValueCompression()
		if mb.GetDictionary() != nil {
			suffix += "+dict"
		}
		if mb.GetDefCompression() != nil {
			suffix += "+def"
		}
		if mb.GetRepCompression() != nil {
			suffix += "+rep"
		}
	case pl.GetFullZipLayout() != nil:
		fz := pl.GetFullZipLayout()
		name, c = "full-zip", fz.GetValueCompression()
		if fz.GetBitsRep() != 0 {
			suffix = "+rep"
		}
	default:
		return fmt.Sprintf("%T", pl.GetLayout())
	}
	kind := strings.TrimPrefix(fmt.Sprintf("%T", c.GetCompression()), "*enc21pb.CompressiveEncoding_")
	switch kind {
	case "InlineBitpacking":
		kind = "bitpacked"
	}
	return name + "/" + strings.ToLower(kind) + suffix
}

// TestFilterConcatRechunkPaths: per encoding, the path every page that lost
// rows took. Mini-block pages of flat, variable and FSST values (with or
// without def levels, with or without a dictionary) are always re-chunked:
// the output page has the source's value compression and its dictionary
// byte for byte, and the chunks that lost no rows are in it unchanged.
// So are bit-packed ones here (pages of few chunks; the split limit is
// TestFilterConcatRechunkSplits). Repetition is never re-chunked. Real rows
// are checked by filterRun (every output row against the live source rows).
func TestFilterConcatRechunkPaths(t *testing.T) {
	clustered := roaring.New()
	clustered.AddRange(100, 111)
	clustered.Add(1500)
	every := roaring.New()
	for i := uint32(1); i < 2000; i += 5 {
		every.Add(i)
	}
	run := filterRun(t, []*roaring.Bitmap{nil, clustered, every}, FilterOptions{PageCost: -1, Workers: 2, BudgetBytes: 4 << 20})
	if run.diff != "" {
		t.Fatalf("rows differ: %s", run.diff)
	}
	cs := make([]CopySource, len(run.srcs))
	for i, s := range run.srcs {
		cs[i] = s.CopySource
	}
	srcs, err := openSources(cs)
	if err != nil {
		t.Fatal(err)
	}
	outF, err := lancefile.Open(bytes.NewReader(run.out), int64(len(run.out)), "out.lance")
	if err != nil {
		t.Fatal(err)
	}
	rc := &rechunkCheck{t: t, run: run, srcs: srcs, outData: map[rechunkSrcPage][]byte{}}
	// path counts by (source, encoding), for pages that lost some rows
	got := map[rechunkKey]map[PagePath]int{}
	outPage := map[int]int{} // next output page per column
	var checks []func()
	for _, ev := range run.all {
		if ev.Path == PathDrop {
			continue
		}
		op := outF.Columns[ev.Column].Meta.GetPages()[outPage[ev.Column]]
		outPage[ev.Column]++
		if ev.SourcePage < 0 || ev.Source < 0 || (ev.Path != PathRechunk && ev.Path != PathReencode && ev.Path != PathFilter) {
			continue
		}
		s := srcs[ev.Source]
		sp := s.f.Columns[s.byID[run.res.Fields[ev.Column]]].Meta.GetPages()[ev.SourcePage]
		spl := pageLayoutOf(t, sp)
		k := rechunkKey{ev.Source, encodingName(spl)}
		if got[k] == nil {
			got[k] = map[PagePath]int{}
		}
		got[k][ev.Path]++
		if ev.Path == PathRechunk {
			if c := rc.page(ev, sp, spl, op); c != nil {
				checks = append(checks, c)
			}
		}
	}
	for _, c := range checks {
		c()
	}
	checkRechunkPathsPerEncoding(t, got)
	if run.res.Paths.Rechunked.Pages == 0 || run.res.Paths.Rechunked.Bytes == 0 {
		t.Errorf("stats: %+v", run.res.Paths)
	}
}

// rechunkKey is a source and the encoding of its pages that lost rows.
type rechunkKey struct {
	src int
	enc string
}

// rechunkSrcPage is a source page of an output column (a split page's
// clean chunks may land in any of its output pages).
type rechunkSrcPage struct{ col, src, page int }

// rechunkCheck checks re-chunked pages of one FilterConcat run against
// their source pages.
type rechunkCheck struct {
	t       *testing.T
	run     filterRunOut
	srcs    []*openSource
	outData map[rechunkSrcPage][]byte // data buffers of the output pages made of each source page
}

func (rc *rechunkCheck) readBuf(s *openSource, b lancefile.Buffer) []byte {
	out := make([]byte, b.Size)
	if _, err := s.R.ReadAt(out, int64(b.Offset)); err != nil {
		rc.t.Fatal(err)
	}
	return out
}

func (rc *rechunkCheck) outBuf(b lancefile.Buffer) []byte {
	return rc.run.out[b.Offset : b.Offset+b.Size]
}

// page checks output page op, re-chunked from source page sp (layout spl):
// it keeps the source's compression and dictionary; the check it returns,
// run once every output page is seen, finds every chunk of sp that lost no
// rows byte for byte in the output.
func (rc *rechunkCheck) page(ev PageEvent, sp *file2pb.ColumnMetadata_Page, spl *enc21pb.PageLayout, op *file2pb.ColumnMetadata_Page) func() {
	t, run := rc.t, rc.run
	s := rc.srcs[ev.Source]
	smb, omb := spl.GetMiniBlockLayout(), pageLayoutOf(t, op).GetMiniBlockLayout()
	if omb == nil || !proto.Equal(smb.GetValueCompression(), omb.GetValueCompression()) || !proto.Equal(smb.GetDictionary(), omb.GetDictionary()) ||
		smb.GetNumDictionaryItems() != omb.GetNumDictionaryItems() || omb.GetNumItems() != ev.Rows {
		t.Errorf("%s: re-chunked page %d of source %d: layout %v, source %v", run.names[ev.Column], ev.SourcePage, ev.Source, omb, smb)
		return nil
	}
	sb, ob := lancefile.PageBuffers(sp), lancefile.PageBuffers(op)
	if smb.GetDictionary() != nil && !bytes.Equal(rc.readBuf(s, sb[2]), rc.outBuf(ob[2])) {
		t.Errorf("%s: re-chunked page lost its dictionary bytes", run.names[ev.Column])
	}
	schunks, err := lancefile.MiniBlockChunks(smb, rc.readBuf(s, sb[0]), int(sb[1].Size))
	if err != nil {
		t.Fatal(err)
	}
	sp2 := rechunkSrcPage{ev.Column, ev.Source, ev.SourcePage}
	rc.outData[sp2] = append(rc.outData[sp2], rc.outBuf(ob[1])...)
	sdata := rc.readBuf(s, sb[1])
	return func() {
		odata := rc.outData[sp2]
		var kept, clean int
		for _, c := range schunks {
			lo := sp.GetPriority() + uint64(c.First)
			if run.srcs[ev.Source].Deleted.IntersectsWithInterval(lo, lo+uint64(c.Values)) {
				continue
			}
			clean++
			if bytes.Contains(odata, sdata[c.Off:c.Off+c.Size]) {
				kept++
			}
		}
		if kept != clean {
			t.Errorf("%s: %d of %d clean chunks found byte for byte in the re-chunked page", run.names[ev.Column], kept, clean)
		}
	}
}

// checkRechunkPathsPerEncoding: mini-block pages without repetition that
// lost rows are re-chunked (bit-packed ones at least under clustered
// deletions), pages with repetition never; every encoding the test data
// should cover lost rows somewhere.
func checkRechunkPathsPerEncoding(t *testing.T, got map[rechunkKey]map[PagePath]int) {
	keys := make([]rechunkKey, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].enc != keys[j].enc {
			return keys[i].enc < keys[j].enc
		}
		return keys[i].src < keys[j].src
	})
	seen := map[string]bool{}
	for _, k := range keys {
		t.Logf("source %d %-32s %v", k.src, k.enc, got[k])
		m := got[k]
		base, _, _ := strings.Cut(strings.TrimPrefix(k.enc, "mini-block/"), "+")
		switch {
		case strings.HasPrefix(k.enc, "mini-block/") && !strings.Contains(k.enc, "+rep") && (base == "flat" || base == "variable" || base == "fsst"):
			if m[PathRechunk] == 0 || m[PathReencode] != 0 {
				t.Errorf("source %d %s: want every page that lost rows re-chunked: %v", k.src, k.enc, m)
			}
			seen[k.enc] = true
		case strings.HasPrefix(k.enc, "mini-block/bitpacked") && !strings.Contains(k.enc, "+rep"):
			if k.src == 1 && (m[PathRechunk] == 0 || m[PathReencode] != 0) {
				t.Errorf("source %d %s: clustered deletions: want re-chunked pages: %v", k.src, k.enc, m)
			}
			seen[k.enc] = true
		case strings.Contains(k.enc, "+rep"):
			if m[PathRechunk] != 0 {
				t.Errorf("source %d %s: repetition is never re-chunked: %v", k.src, k.enc, m)
			}
		}
	}
	for _, enc := range []string{"mini-block/flat+def", "mini-block/variable+def", "mini-block/bitpacked+def", "mini-block/bitpacked+dict+def"} {
		if !seen[enc] {
			t.Errorf("no page of encoding %s lost rows: the test data no longer covers it", enc)
		}
	}
}

func TestFilterConcatRechunkSplits(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	fields, err := FieldsFromArrow(schema, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	for i := 0; i < 8192; i++ {
		b.Append(int64(i*7) % 100000)
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 8192)
	defer rec.Release()
	src := writeMem(t, fields, []string{"id"}, []arrow.RecordBatch{rec}, Options{PageBytes: 1 << 20})
	two := roaring.BitmapOf(5, 6, 1500)
	many := roaring.New()
	for i := uint32(3); i < 8192; i += 5 {
		many.Add(i)
	}
	for _, c := range []struct {
		name  string
		del   *roaring.Bitmap
		path  PagePath
		pages int
	}{{"two chunks", two, PathRechunk, 3}, {"most chunks", many, PathReencode, 1}} {
		t.Run(c.name, func(t *testing.T) {
			var evs []PageEvent
			var out bytes.Buffer
			res, err := FilterConcat(context.Background(), &out, fields, []FilterSource{{CopySource: src, Deleted: c.del}},
				FilterOptions{PageCost: -1, Workers: 1, OnPage: func(ev PageEvent) { evs = append(evs, ev) }})
			if err != nil {
				t.Fatal(err)
			}
			if diff := diffFile(t, out.Bytes(), schema, liveRecords([]arrow.RecordBatch{rec}, c.del)); diff != "" {
				t.Fatalf("rows differ: %s", diff)
			}
			if len(evs) != c.pages {
				t.Fatalf("%d output pages, want %d: %+v", len(evs), c.pages, evs)
			}
			for _, ev := range evs {
				if ev.Path != c.path {
					t.Errorf("page %+v: want %v", ev, c.path)
				}
			}
			if c.path == PathRechunk && res.Paths.Rechunked.Pages != 3 {
				t.Errorf("stats %+v", res.Paths)
			}
		})
	}
}
