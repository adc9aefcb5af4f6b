// Package vector reads and remaps the IVF vector indices lance 8.0.0
// builds (`@lancedb/lancedb` 0.31.0: ivfFlat, ivfPq, ivfRq, hnswSq, hnswPq)
// at the file level.
//
// An index segment is a directory _indices/<uuid>/ with two Lance files
// (https://github.com/lancedb/lance/blob/main/rust/lance/src/index/vector/builder.rs,
// merge_partitions):
//   - index.idx: the IVF model (centroids; protobuf lance.index.pb.IVF in the
//     global buffer named by schema metadata "lance:ivf"), "lance:index"
//     {"type","distance_type"}, and the sub-index per partition: FLAT
//     ("lance:flat", no rows) or HNSW ("lance:hnsw" per-partition graph
//     metadata; rows __vector_id, __neighbors, _distance).
//   - auxiliary.idx: the quantized storage, partition after partition: _rowid
//     (row addresses) and the codes ("flat" raw vectors, "__pq_code"
//     transposed per partition, "__sq_code", "_rabit_codes" packed per
//     partition plus RaBitQ factor columns); "lance:ivf" names the global
//     buffer with per-partition offsets/lengths; "storage_metadata" holds
//     the quantizer metadata (the PQ codebook sits in another global buffer).
//
// OpenIndexFile / OpenStorageFile read the metadata; StorageFile.ReadPartition
// reads one partition. Remap writes a remapped segment through a Mapping one
// partition at a time (memory: one partition, like lance's own remap):
// RemapStorage drops deleted rows, maps row ids and keeps codes, every other
// byte of metadata and every other global buffer; a FLAT sub-index's
// index.idx does not depend on row ids and is copied; an HNSW sub-index
// (over SQ or PQ storage, l2) gets each partition's graph rebuilt from the
// remapped storage with the partition's stored build parameters, which is
// what lance's remap does (HNSW::remap in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/hnsw/builder.rs),
// laid out like lance's HNSW::to_batch and HnswMetadata (level_offsets
// counted as lance counts them).
//
// A large segment can be remapped in parts (parts.go, index.PartRemapper):
// RemapPart writes a range of IVF partitions as pieces (Lance files of the
// segment files' schema, no global buffers) and JoinParts concatenates the
// pieces of every range by page copy (lancewrite.ConcatRowsWith), writing
// the IVF offsets and lengths of all partitions, an HNSW index's
// per-partition graph metadata, and the old files' other global buffers
// and schema metadata: the same segment a one-task Remap writes.
//
// Lance's remap also joins the smallest partition into its neighbours when
// it falls under a quarter of the target partition size, which needs the raw
// vectors from the table; Remap keeps every partition (still a valid index,
// same centroids). On lance 8.0.0's optimize() of the tables in the oracle
// test, its compaction-time remap did not join either, and its segments
// equal ours partition by partition.
//
// Catch-up (catchup.go): NewModel loads a segment's trained model
// (centroids, PQ codebook or SQ bounds); a Delta assigns new rows to the
// nearest centroid and encodes them with that model, and Write emits a
// delta segment or, when Layout says so (Lance's quarter-partition rule) or
// the caller asks (max_segments), one segment merging the base segments'
// stored rows with the new ones (Model.Shares refuses bases of another
// model). IVF_RQ (rq.go): the residual is rotated with the segment's fast
// rotation and stored as sign bits plus three factors, as lance computes
// them; with more than 1 bit per dimension also ex codes and two more
// factors (rq_ex.go). Distances use AVX2+FMA kernels
// (kernels_amd64.s) when the CPU has both, unrolled Go kernels elsewhere;
// the result does not depend on which ran.
//
// The row-address mapping (index.Mapping, index.CompactionMapping) comes
// from internal/format/index.
//
// Imports: internal/format/index, internal/format/lancefile,
// internal/format/lancewrite, internal/format/pb/indexpb, internal/minheap;
// no I/O beyond the readers and writers handed in.
package vector
