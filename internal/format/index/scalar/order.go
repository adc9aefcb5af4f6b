package scalar

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// compareFunc orders row i of one array against row j of another of the
// same type as Lance sorts btree values: nulls first, then ascending;
// floats in total order (-0 before +0, NaN last), strings and binary by
// bytes.
type compareFunc func(i, j int) int

func newCompare(a, b arrow.Array) (compareFunc, error) {
	if !arrow.TypeEqual(a.DataType(), b.DataType()) {
		return nil, fmt.Errorf("%w: comparing %s with %s", ErrUnsupported, a.DataType(), b.DataType())
	}
	var vals func(i, j int) int
	switch x := a.(type) {
	case *array.Int8:
		y := b.(*array.Int8)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Int16:
		y := b.(*array.Int16)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Int32:
		y := b.(*array.Int32)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Int64:
		y := b.(*array.Int64)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Uint8:
		y := b.(*array.Uint8)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Uint16:
		y := b.(*array.Uint16)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Uint32:
		y := b.(*array.Uint32)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Uint64:
		y := b.(*array.Uint64)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Float32:
		y := b.(*array.Float32)
		vals = func(i, j int) int { return totalCmp(float64(x.Value(i)), float64(y.Value(j))) }
	case *array.Float64:
		y := b.(*array.Float64)
		vals = func(i, j int) int { return totalCmp(x.Value(i), y.Value(j)) }
	case *array.Date32:
		y := b.(*array.Date32)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Date64:
		y := b.(*array.Date64)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Timestamp:
		y := b.(*array.Timestamp)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Time32:
		y := b.(*array.Time32)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Time64:
		y := b.(*array.Time64)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Duration:
		y := b.(*array.Duration)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Boolean:
		y := b.(*array.Boolean)
		vals = func(i, j int) int { return cmp.Compare(b2i(x.Value(i)), b2i(y.Value(j))) }
	case *array.String:
		y := b.(*array.String)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.LargeString:
		y := b.(*array.LargeString)
		vals = func(i, j int) int { return cmp.Compare(x.Value(i), y.Value(j)) }
	case *array.Binary:
		y := b.(*array.Binary)
		vals = func(i, j int) int { return bytes.Compare(x.Value(i), y.Value(j)) }
	case *array.LargeBinary:
		y := b.(*array.LargeBinary)
		vals = func(i, j int) int { return bytes.Compare(x.Value(i), y.Value(j)) }
	case *array.FixedSizeBinary:
		y := b.(*array.FixedSizeBinary)
		vals = func(i, j int) int { return bytes.Compare(x.Value(i), y.Value(j)) }
	default:
		return nil, fmt.Errorf("%w: ordering values of type %s", ErrUnsupported, a.DataType())
	}
	return func(i, j int) int {
		an, bn := a.IsNull(i), b.IsNull(j)
		switch {
		case an && bn:
			return 0
		case an:
			return -1
		case bn:
			return 1
		}
		return vals(i, j)
	}, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// totalCmp is IEEE 754 totalOrder on the values' bits (Rust's total_cmp):
// -NaN < -Inf < ... < -0 < +0 < ... < +Inf < NaN.
func totalCmp(x, y float64) int {
	key := func(f float64) int64 {
		v := int64(math.Float64bits(f))
		return v ^ int64(uint64(v>>63)>>1)
	}
	return cmp.Compare(key(x), key(y))
}

// keyOf renders a value as a map key, exact for every type newCompare
// orders (the null value has its own key).
func keyOf(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "\x00null"
	}
	var b [8]byte
	switch x := a.(type) {
	case *array.String:
		return "s" + x.Value(i)
	case *array.LargeString:
		return "s" + x.Value(i)
	case *array.Binary:
		return "b" + string(x.Value(i))
	case *array.LargeBinary:
		return "b" + string(x.Value(i))
	case *array.FixedSizeBinary:
		return "b" + string(x.Value(i))
	case *array.Float64:
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x.Value(i)))
		return "f" + string(b[:])
	case *array.Float32:
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(float64(x.Value(i))))
		return "f" + string(b[:])
	}
	return "v" + a.ValueStr(i)
}
