package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// maxDiffRows bounds how many mismatching rows Equal prints per column.
const maxDiffRows = 5

// Equal fails the test unless got holds the same columns (by name, in any
// order) with the same logical values, row for row, as want (see Digest for
// what "same" means). The message names each differing column and shows
// its first mismatching rows.
func Equal(t testing.TB, want, got arrow.Table) {
	t.Helper()
	if msg := Diff(want, got); msg != "" {
		t.Fatalf("oracle: tables differ:\n%s", msg)
	}
}

// Diff returns "" when want and got are equal in Equal's sense, else a
// readable description of the differences.
func Diff(want, got arrow.Table) string {
	var b strings.Builder
	if want.NumRows() != got.NumRows() {
		fmt.Fprintf(&b, "rows: want %d, got %d\n", want.NumRows(), got.NumRows())
	}
	wcols := columnsByName(want)
	gcols := columnsByName(got)
	var names []string
	for n := range wcols {
		if _, ok := gcols[n]; !ok {
			fmt.Fprintf(&b, "column %q missing (want type %s)\n", n, wcols[n].DataType())
			continue
		}
		names = append(names, n)
	}
	for n := range gcols {
		if _, ok := wcols[n]; !ok {
			fmt.Fprintf(&b, "unexpected column %q (type %s)\n", n, gcols[n].DataType())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		w, g := wcols[n], gcols[n]
		if CanonicalType(w.DataType()) != CanonicalType(g.DataType()) {
			fmt.Fprintf(&b, "column %q: type: want %s, got %s\n", n, w.DataType(), g.DataType())
			continue
		}
		dw := digestChunks(w.DataType(), w.Data().Chunks())
		dg := digestChunks(g.DataType(), g.Data().Chunks())
		if dw == dg {
			continue
		}
		fmt.Fprintf(&b, "column %q (%s):\n", n, CanonicalType(w.DataType()))
		wc, gc := newCursor(w), newCursor(g)
		shown := 0
		rows := min(w.Len(), g.Len())
		for r := 0; r < rows && shown < maxDiffRows; r++ {
			wa, wi := wc.at(r)
			ga, gi := gc.at(r)
			if bytes.Equal(rowEncoding(wa, wi), rowEncoding(ga, gi)) {
				continue
			}
			fmt.Fprintf(&b, "  row %d: want %s, got %s\n", r, render(wa, wi), render(ga, gi))
			shown++
		}
		if shown == 0 {
			fmt.Fprintf(&b, "  first %d rows agree; lengths %d vs %d\n", rows, w.Len(), g.Len())
		}
	}
	return b.String()
}

func columnsByName(tbl arrow.Table) map[string]*arrow.Column {
	m := make(map[string]*arrow.Column, tbl.NumCols())
	for i := 0; i < int(tbl.NumCols()); i++ {
		c := tbl.Column(i)
		m[c.Name()] = c
	}
	return m
}

// cursor maps a row number of a chunked column to (chunk, index).
type cursor struct {
	chunks []arrow.Array
	starts []int
}

func newCursor(c *arrow.Column) *cursor {
	cu := &cursor{chunks: c.Data().Chunks()}
	n := 0
	for _, ch := range cu.chunks {
		cu.starts = append(cu.starts, n)
		n += ch.Len()
	}
	return cu
}

func (c *cursor) at(row int) (arrow.Array, int) {
	k := sort.Search(len(c.starts), func(i int) bool { return c.starts[i] > row }) - 1
	return c.chunks[k], row - c.starts[k]
}

func render(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "null"
	}
	s := ""
	if b, err := json.Marshal(a.GetOneForMarshal(i)); err == nil {
		s = string(b)
	} else {
		s = a.ValueStr(i)
	}
	if len(s) > 200 {
		s = s[:200] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}
