// Package scan is the one reader of a Lance fragment's live rows as Arrow
// record batches: projection by field id, row take, deletion masking (the
// deletion file read by engine/table), and ScanManifest over a whole
// version; `lanced scan`/`take`, the rewrite's re-encode path and the
// repack's decode fallback all read through it. Each data file is checked
// against the manifest (the file format version it names, physical_rows):
// a mismatch is format.ErrCorrupt, attributed to the fragment and file
// (job.FragmentError). Fragments whose layout the reader does not support are
// refused with job.ErrUnsupported (a field whose columns spread over
// several data files, a file under an external base path).
package scan
