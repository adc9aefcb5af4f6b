package vector

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
)

// Drift: how far the rows a catch-up adds are from the index's trained
// centroids. A row's distance is the model's assignment distance (squared
// L2, or dot distance 1 - x·c; cosine vectors normalized first) from its
// vector to the nearest centroid: what assigning it to a partition
// computes anyway. Lance keeps no record of the training rows' distances,
// so the reference is measured on a sample of the rows the model segment
// indexes, read back from the table (DriftReference: up to
// DriftSampleRows rows of up to DriftSampleFragments of its fragments).
// An added row is far from every centroid when its distance is above the
// DriftQuantile quantile of the sample's: rows drawn from the distribution
// the index was built on are far with probability about 1 - DriftQuantile;
// a share well above that means the new rows come from elsewhere and the
// centroids no longer partition them well (recall drops at a fixed
// nprobes), which only a retrain (Lance's createIndex with replace) fixes.
// Stored codes are not used for the reference: a PQ code decodes to a
// codebook entry, whose norm is bounded by the training residuals, so a
// shifted vector's decoded residual looks in-distribution.
const (
	DriftQuantile        = 0.99
	DriftSampleRows      = 8192
	DriftSampleFragments = 8
)

// distance is the model's distance from v to centroid p.
func (m *Model) distance(v []float32, p int) float32 {
	c := m.centroids[p*m.dim : (p+1)*m.dim]
	if m.dot {
		return 1 - dotProduct(v, c)
	}
	return l2Bounded(v, c, float32(math.Inf(1)))
}

// DriftReference collects the nearest-centroid distances of rows the
// index was built with.
type DriftReference struct {
	m     *Model
	dists []float32
}

// NewDriftReference starts an empty reference sample on the model.
func (m *Model) NewDriftReference() *DriftReference { return &DriftReference{m: m} }

// Add measures the vectors of a column (as Delta.Add reads it; null and
// not-finite vectors are skipped).
func (r *DriftReference) Add(col arrow.Array) error {
	fl, all, base, err := r.m.vectorValues(col, "drift sample")
	if err != nil {
		return err
	}
	dim := r.m.dim
	v := make([]float32, dim)
	for i := 0; i < fl.Len(); i++ {
		if fl.IsNull(i) {
			continue
		}
		copy(v, all[base+i*dim:base+(i+1)*dim])
		if !r.m.prepare(v) {
			continue
		}
		p := r.m.nearest(r.m.centroids, r.m.parts, v)
		r.dists = append(r.dists, r.m.distance(v, p))
	}
	return nil
}

// Len is how many rows the sample measured.
func (r *DriftReference) Len() int { return len(r.dists) }

// Bound is the DriftQuantile quantile of the sample's distances (0 for an
// empty sample).
func (r *DriftReference) Bound() float32 {
	if len(r.dists) == 0 {
		return 0
	}
	return quantile(r.dists, DriftQuantile)
}

// quantile is the q quantile of xs (nearest rank; xs is sorted in place).
func quantile(xs []float32, q float64) float32 {
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// Fingerprint identifies the trained model: a hash of its centroids and
// quantizer (PQ codebook, SQ bounds). Another fingerprint for the same
// index means it was retrained.
func (m *Model) Fingerprint() string {
	h := sha256.New()
	h.Write(m.x.IVF.GetCentroidsTensor().GetData())
	var b [8]byte
	for _, x := range m.book {
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(x))
		h.Write(b[:4])
	}
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(m.sqStart))
	h.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(m.sqEnd))
	h.Write(b[:])
	h.Write([]byte(m.x.Type + "/" + m.x.Distance))
	return hex.EncodeToString(h.Sum(nil)[:12])
}
