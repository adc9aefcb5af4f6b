package engine

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// The re-encode path of a rewrite runs as two stages: a reader goroutine
// decodes the fragments' live rows (scan.ScanFragment) while the caller encodes
// and writes them. Decoding and encoding each take about half of a
// rewrite's CPU, so on two cores the stages overlap. The channel holds
// rewriteReadAhead batches: memory grows by that many decoded batches, not
// with the number or size of the fragments.
const rewriteReadAhead = 1

// rewriteBatchRows is the batch size of a rewrite's scan: it bounds the
// decoded rows held at once (batch size is the memory knob).
const rewriteBatchRows = 8192

// scanItem is one step of the reader stage, in order: a fragment's start
// (frag and deleted set), one of its batches (rec), or a failure (err).
type scanItem struct {
	frag    *tablepb.DataFragment
	deleted *roaring.Bitmap
	rec     arrow.RecordBatch
	err     error
}

// scanFragments streams the live rows of frags on a goroutine. The caller
// must call the returned stop function (it cancels the reader and releases
// batches it did not take) once it stops receiving.
func scanFragments(ctx context.Context, tbl *table.Table, fields []*filepb.Field, frags []*tablepb.DataFragment) (<-chan scanItem, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan scanItem, rewriteReadAhead)
	done := make(chan struct{})
	send := func(it scanItem) bool {
		select {
		case ch <- it:
			return true
		case <-ctx.Done():
			if it.rec != nil {
				it.rec.Release()
			}
			return false
		}
	}
	go func() {
		defer close(done)
		defer close(ch)
		for _, f := range frags {
			if !scanOne(ctx, tbl, fields, f, send) {
				return
			}
		}
	}()
	stop := func() {
		cancel()
		for it := range ch {
			if it.rec != nil {
				it.rec.Release()
			}
		}
		<-done
	}
	return ch, stop
}

// scanOne sends the start of fragment f, then its live rows; false when the
// stage must stop (a failure was sent, or the receiver went away).
func scanOne(ctx context.Context, tbl *table.Table, fields []*filepb.Field, f *tablepb.DataFragment, send func(scanItem) bool) bool {
	fr, err := scan.ScanFragment(ctx, tbl.Bucket(), fields, f, scan.ScanOptions{BatchRows: rewriteBatchRows})
	if err != nil {
		send(scanItem{err: fmt.Errorf("read fragment %d: %w", f.GetId(), err)})
		return false
	}
	defer fr.Release()
	deleted := fr.Deleted()
	if deleted != nil && deleted.IsEmpty() {
		deleted = nil
	}
	if !send(scanItem{frag: f, deleted: deleted}) {
		return false
	}
	for fr.Next() {
		rec := fr.RecordBatch()
		rec.Retain()
		if !send(scanItem{rec: rec}) {
			return false
		}
	}
	if err := fr.Err(); err != nil {
		send(scanItem{err: fmt.Errorf("read fragment %d: %w", f.GetId(), err)})
		return false
	}
	return true
}
