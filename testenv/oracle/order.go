package oracle

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// DigestByKey is Digest with rows taken in ascending order of the key
// column (an integer or string column without nulls; ties keep scan order)
// instead of scan order: for comparing tables whose rewrite may legally
// reorder fragments. The key column's own digest is included.
func DigestByKey(tbl arrow.Table, key string) (map[string]string, error) {
	order, err := keyOrder(tbl, key)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, tbl.NumCols())
	for i := 0; i < int(tbl.NumCols()); i++ {
		col := tbl.Column(i)
		out[col.Name()] = digestInOrder(col, order)
	}
	return out, nil
}

// EqualByKey is Equal after ordering both tables' rows by key (see
// DigestByKey); the diff names key values rather than row numbers.
func EqualByKey(t testing.TB, want, got arrow.Table, key string) {
	t.Helper()
	wo, err := keyOrder(want, key)
	if err != nil {
		t.Fatalf("oracle: want: %v", err)
	}
	gord, err := keyOrder(got, key)
	if err != nil {
		t.Fatalf("oracle: got: %v", err)
	}
	if msg := diffOrdered(want, got, wo, gord, key); msg != "" {
		t.Fatalf("oracle: tables differ (rows ordered by %s):\n%s", key, msg)
	}
}

func keyOrder(tbl arrow.Table, key string) ([]int, error) {
	idx := tbl.Schema().FieldIndices(key)
	if len(idx) != 1 {
		return nil, fmt.Errorf("key column %q: found %d times", key, len(idx))
	}
	col := tbl.Column(idx[0])
	n := int(col.Len())
	type kv struct {
		i int
		n int64
		u uint64
		s string
	}
	keys := make([]kv, 0, n)
	cu := newCursor(col)
	var kind byte
	for r := 0; r < n; r++ {
		a, i := cu.at(r)
		if a.IsNull(i) {
			return nil, fmt.Errorf("key column %q: null at row %d", key, r)
		}
		k := kv{i: r}
		switch v := a.(type) {
		case *array.Int8:
			k.n, kind = int64(v.Value(i)), 'i'
		case *array.Int16:
			k.n, kind = int64(v.Value(i)), 'i'
		case *array.Int32:
			k.n, kind = int64(v.Value(i)), 'i'
		case *array.Int64:
			k.n, kind = v.Value(i), 'i'
		case *array.Uint8:
			k.u, kind = uint64(v.Value(i)), 'u'
		case *array.Uint16:
			k.u, kind = uint64(v.Value(i)), 'u'
		case *array.Uint32:
			k.u, kind = uint64(v.Value(i)), 'u'
		case *array.Uint64:
			k.u, kind = v.Value(i), 'u'
		case *array.String:
			k.s, kind = v.Value(i), 's'
		case *array.LargeString:
			k.s, kind = v.Value(i), 's'
		default:
			return nil, fmt.Errorf("key column %q: type %s is not an integer or string", key, a.DataType())
		}
		keys = append(keys, k)
	}
	slices.SortStableFunc(keys, func(a, b kv) int {
		switch kind {
		case 'i':
			return cmp.Compare(a.n, b.n)
		case 'u':
			return cmp.Compare(a.u, b.u)
		default:
			return cmp.Compare(a.s, b.s)
		}
	})
	order := make([]int, n)
	for j, k := range keys {
		order[j] = k.i
	}
	return order, nil
}

func digestInOrder(col *arrow.Column, order []int) string {
	h := sha256.New()
	e := newEncoder(h)
	e.w.WriteString(CanonicalType(col.DataType()))
	e.w.WriteByte('\n')
	cu := newCursor(col)
	for _, r := range order {
		a, i := cu.at(r)
		e.value(a, i)
	}
	if err := e.w.Flush(); err != nil {
		panic(err) // writes to a hash never fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

func diffOrdered(want, got arrow.Table, wo, gord []int, key string) string {
	var b bytes.Buffer
	if len(wo) != len(gord) {
		fmt.Fprintf(&b, "rows: want %d, got %d\n", len(wo), len(gord))
	}
	wcols, gcols := columnsByName(want), columnsByName(got)
	names := make([]string, 0, len(wcols))
	for n := range wcols {
		if _, ok := gcols[n]; !ok {
			fmt.Fprintf(&b, "column %q missing\n", n)
			continue
		}
		names = append(names, n)
	}
	for n := range gcols {
		if _, ok := wcols[n]; !ok {
			fmt.Fprintf(&b, "unexpected column %q\n", n)
		}
	}
	slices.Sort(names)
	wk, gk := newCursor(wcols[key]), newCursor(gcols[key])
	for _, n := range names {
		w, g := wcols[n], gcols[n]
		if CanonicalType(w.DataType()) != CanonicalType(g.DataType()) {
			fmt.Fprintf(&b, "column %q: type: want %s, got %s\n", n, w.DataType(), g.DataType())
			continue
		}
		if digestInOrder(w, wo) == digestInOrder(g, gord) {
			continue
		}
		fmt.Fprintf(&b, "column %q:\n", n)
		wc, gc := newCursor(w), newCursor(g)
		shown := 0
		for j := 0; j < min(len(wo), len(gord)) && shown < maxDiffRows; j++ {
			wa, wi := wc.at(wo[j])
			ga, gi := gc.at(gord[j])
			if bytes.Equal(rowEncoding(wa, wi), rowEncoding(ga, gi)) {
				continue
			}
			ka, ki := wk.at(wo[j])
			kb, kj := gk.at(gord[j])
			fmt.Fprintf(&b, "  %s %s / %s: want %s, got %s\n", key, render(ka, ki), render(kb, kj), render(wa, wi), render(ga, gi))
			shown++
		}
	}
	return b.String()
}
