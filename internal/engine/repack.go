package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lanced-dev/lanced/internal/engine/progress"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
	"google.golang.org/protobuf/proto"
)

// fieldsByID returns the schema fields whose ids are in ids, in schema
// (pre-order) order.
func fieldsByID(schema []*filepb.Field, ids []int32) []*filepb.Field {
	want := make(map[int32]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var out []*filepb.Field
	for _, f := range schema {
		if want[f.GetId()] {
			out = append(out, f)
		}
	}
	return out
}

// ExecuteRepack runs one repack task against m, the manifest of its read
// version: for every planned file it copies the encoded pages of the moved
// columns out of the source files into one new file (a column-wise merge:
// every file of a fragment holds the same physical rows, deleted rows
// included), falling back to decode/re-encode where a page copy is not
// provably safe. If any file fails, everything the task wrote is deleted.
func ExecuteRepack(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.RepackTask) (out *job.RepackOutput, err error) {
	if m.GetVersion() != t.ReadVersion {
		return nil, fmt.Errorf("repack planned at version %d given manifest %d", t.ReadVersion, m.GetVersion())
	}
	if err := format.CheckWritable(m); err != nil {
		return nil, err
	}
	frags, err := taskFragments(m, []uint64{t.Fragment})
	if err != nil {
		return nil, err
	}
	frag := frags[0]
	ver, err := storageVersion(m)
	if err != nil {
		return nil, err
	}
	b := tbl.Bucket()
	out = &job.RepackOutput{Repack: t}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, out.Outputs)
			out = nil
		}
	}()

	made := make([]*tablepb.DataFile, 0, len(t.Files))
	for i := range t.Files {
		srcs, outFields, err := repackInputs(m, frag, t, i)
		if err != nil {
			return out, err
		}
		for _, df := range srcs {
			out.BytesRead += int64(df.GetFileSizeBytes())
		}
		df, copied, err := writeRepackFile(ctx, tbl, frag, srcs, outFields, ver, out)
		if err != nil {
			return out, fmt.Errorf("repack fragment %d file %d: %w", t.Fragment, i, err)
		}
		if copied {
			out.Copied++
		} else {
			out.Reencoded++
		}
		made = append(made, df)
		var srcBytes int64
		for _, sf := range srcs {
			srcBytes += int64(sf.GetFileSizeBytes())
		}
		rows := int64(frag.GetPhysicalRows())
		progress.Add(ctx, rows*int64(i+1)/int64(len(t.Files))-rows*int64(i)/int64(len(t.Files)), srcBytes)
	}
	files := repackedFiles(frag, t, made)
	out.Result = &job.RepackResult{Base: frag, Files: files}
	return out, nil
}

// repackInputs are the source files and output fields of planned file i of
// repack t of frag.
func repackInputs(m *tablepb.Manifest, frag *tablepb.DataFragment, t *job.RepackTask, i int) ([]*tablepb.DataFile, []*filepb.Field, error) {
	pf := t.Files[i]
	var srcs []*tablepb.DataFile
	for _, p := range pf.Sources {
		i := slices.IndexFunc(frag.GetFiles(), func(df *tablepb.DataFile) bool { return df.GetPath() == p })
		if i < 0 {
			return nil, nil, fmt.Errorf("fragment %d has no data file %s: %w", t.Fragment, p, job.ErrStale)
		}
		srcs = append(srcs, frag.GetFiles()[i])
	}
	if len(srcs) == 0 {
		return nil, nil, fmt.Errorf("repack file %d of fragment %d has no sources: %w", i, t.Fragment, job.ErrInvalidTask)
	}
	outFields := fieldsByID(m.GetFields(), pf.Fields)
	if len(outFields) == 0 {
		return nil, nil, fmt.Errorf("repack file %d of fragment %d holds no schema field: %w", i, t.Fragment, job.ErrInvalidTask)
	}
	return srcs, outFields, nil
}

// repackedFiles are frag's data files after a repack wrote made[i] for
// t.Files[i]: each new file takes the place of its first source, emptied
// files go, and a kept file that gave up some fields gets tombstones for
// them, so every field lives in exactly one file of the fragment.
func repackedFiles(frag *tablepb.DataFragment, t *job.RepackTask, made []*tablepb.DataFile) []*tablepb.DataFile {
	moved := map[int32]bool{}
	sourceOf := map[string]*tablepb.DataFile{} // first source path -> new file
	for i, pf := range t.Files {
		for _, id := range pf.Fields {
			moved[id] = true
		}
		sourceOf[pf.Sources[0]] = made[i]
	}
	removes := map[string]bool{}
	for _, p := range t.Removes {
		removes[p] = true
	}
	var files []*tablepb.DataFile
	for _, df := range frag.GetFiles() {
		if nf := sourceOf[df.GetPath()]; nf != nil {
			files = append(files, nf)
		}
		if removes[df.GetPath()] {
			continue
		}
		kept := proto.Clone(df).(*tablepb.DataFile)
		for i, id := range kept.Fields {
			if moved[id] {
				kept.Fields[i] = format.TombstoneFieldID
			}
		}
		files = append(files, kept)
	}
	return files
}

// writeRepackFile writes one new file from srcs holding outFields: a page
// copy when possible, else a decode/re-encode of the same rows.
func writeRepackFile(ctx context.Context, tbl *table.Table, frag *tablepb.DataFragment, srcs []*tablepb.DataFile, outFields []*filepb.Field, ver lancewrite.Version, out *job.RepackOutput) (*tablepb.DataFile, bool, error) {
	b := tbl.Bucket()
	var cs []lancewrite.CopySource
	var opened []store.ReaderAt
	defer func() {
		for _, r := range opened {
			_ = r.Close()
		}
	}()
	for _, df := range srcs {
		key := format.DataFileKey(df.GetPath())
		ra, err := b.OpenReaderAt(ctx, key)
		if err != nil {
			return nil, false, fmt.Errorf("open %s: %w", key, err)
		}
		opened = append(opened, ra)
		cs = append(cs, lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df})
	}
	name := newDataFileName()
	key := format.DataFileKey(name)
	res, err := writeObject(ctx, b, key, out, func(w io.Writer) (lancewrite.Result, error) {
		return lancewrite.CopyColumns(ctx, w, cs, outFields)
	})
	copied := true
	if errors.Is(err, lancewrite.ErrCopyUnsupported) {
		copied = false
		// Same rows, decoded: a fragment made of just the sources, read
		// with the deleted rows (a repack keeps them in place).
		src := &tablepb.DataFragment{Id: frag.GetId(), Files: srcs, PhysicalRows: frag.GetPhysicalRows()}
		name = newDataFileName()
		key = format.DataFileKey(name)
		res, err = writeObject(ctx, b, key, out, reencodeRows(ctx, b, outFields, src, scan.ScanOptions{KeepDeleted: true, BatchRows: rewriteBatchRows}, ver))
	}
	if err != nil {
		return nil, false, err
	}
	if res.NumRows != frag.GetPhysicalRows() {
		return nil, false, fmt.Errorf("%w: %s has %d rows, fragment %d has %d", job.ErrInvariant, key, res.NumRows, frag.GetId(), frag.GetPhysicalRows())
	}
	return dataFile(name, res), copied, nil
}

// writeObject streams one new object through fn; the object is visible only
// if fn and the upload succeed. The key is recorded in out.Outputs first so
// a crash between upload and commit leaves nothing unaccounted for.
func writeObject(ctx context.Context, b *store.Bucket, key string, out *job.RepackOutput, fn func(io.Writer) (lancewrite.Result, error)) (lancewrite.Result, error) {
	res, err := writeOutput(ctx, b, key, &out.Outputs, fn)
	if err != nil {
		return res, err
	}
	failpoint.Hit("repack.file")
	out.BytesWritten += res.Size
	return res, nil
}

// writeOutput streams one new object through fn, recording key in the
// journal and in outputs before anything is written; the object is visible
// only if fn and the upload succeed.
func writeOutput(ctx context.Context, b *store.Bucket, key string, outputs *[]string, fn func(io.Writer) (lancewrite.Result, error)) (lancewrite.Result, error) {
	if err := journal.RecordOutput(ctx, key); err != nil {
		return lancewrite.Result{}, err
	}
	sw, err := b.NewWriter(ctx, key)
	if err != nil {
		return lancewrite.Result{}, err
	}
	*outputs = append(*outputs, key)
	res, err := fn(sw)
	if err != nil {
		_ = abortWriter(sw)
		return res, err
	}
	if err := sw.Close(); err != nil {
		return res, fmt.Errorf("upload %s: %w", key, err)
	}
	return res, nil
}

// reencodeRows returns a writer callback that decodes the rows opts selects
// from src's files and encodes them batch by batch as one data file of
// version ver.
func reencodeRows(ctx context.Context, b *store.Bucket, fields []*filepb.Field, src *tablepb.DataFragment, opts scan.ScanOptions, ver lancewrite.Version) func(io.Writer) (lancewrite.Result, error) {
	return func(w io.Writer) (lancewrite.Result, error) {
		fr, err := scan.ScanFragment(ctx, b, fields, src, opts)
		if err != nil {
			return lancewrite.Result{}, err
		}
		defer fr.Release()
		lw, err := lancewrite.NewWriter(w, fields, lancewrite.Options{Version: ver})
		if err != nil {
			return lancewrite.Result{}, err
		}
		for fr.Next() {
			if err := lw.Write(fr.RecordBatch()); err != nil {
				return lancewrite.Result{}, err
			}
		}
		if err := fr.Err(); err != nil {
			return lancewrite.Result{}, err
		}
		return lw.Close()
	}
}
