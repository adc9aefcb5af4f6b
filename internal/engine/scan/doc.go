// Package scan reads a Lance fragment's live rows as Arrow record batches:
// projection by field id, row take, deletion masking, and ScanManifest over
// a whole version. Fragments whose layout the reader does not support are
// refused with job.ErrUnsupported (a field whose columns spread over
// several data files, a file under an external base path).
package scan
