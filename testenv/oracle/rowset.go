package oracle

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// RowSetDigest is an order-insensitive digest of a table's rows (a
// multiset of whole rows, each rendered column by column with arrow-go's
// ValueStr), and the row count. Compaction moves rewritten fragments to the
// end of the scan order, as Lance's own optimize does; tests that compare a
// table before and after maintenance, or with a control copy, compare this.
func RowSetDigest(tbl arrow.Table) (string, int) {
	rdr := array.NewTableReader(tbl, 64*1024)
	defer rdr.Release()
	var rows []string
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for r := 0; r < int(rec.NumRows()); r++ {
			var sb strings.Builder
			for c, col := range rec.Columns() {
				sb.WriteString(rec.Schema().Field(c).Name)
				sb.WriteByte('=')
				if col.IsNull(r) {
					sb.WriteString("<null>")
				} else {
					sb.WriteString(col.ValueStr(r))
				}
				sb.WriteByte(0x1f)
			}
			rows = append(rows, sb.String())
		}
	}
	slices.Sort(rows)
	h := sha256.New()
	for _, r := range rows {
		h.Write([]byte(r))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), len(rows)
}
