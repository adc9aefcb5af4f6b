package scalar

import "github.com/apache/arrow-go/v18/arrow"

// CompareForTest exposes the btree value order to the tests.
func CompareForTest(a, b arrow.Array) func(i, j int) int {
	c, err := newCompare(a, b)
	if err != nil {
		panic(err)
	}
	return c
}
