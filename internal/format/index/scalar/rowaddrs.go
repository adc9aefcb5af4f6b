package scalar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/index"
)

// ErrUnsupported marks an index whose layout this package does not know;
// the caller must not remap it (keep its fragments instead).
var ErrUnsupported = errors.New("scalar index: unsupported")

// ErrCorrupt marks index bytes that contradict themselves.
var ErrCorrupt = errors.New("scalar index: corrupt")

// RowAddrs is a set of row addresses grouped by fragment: Lance's
// RowAddrTreeMap (RowIdTreeMap before it was renamed), the value of every
// bitmap and labelList entry. A fragment is either a roaring bitmap of row
// offsets or Full (every row of the fragment).
//
// Serialized (https://github.com/lancedb/lance/blob/main/rust/lance-core/src/utils/mask.rs,
// serialize_into): u32 number of fragments, then per fragment in ascending
// id order u32 fragment id, u32 byte size of the bitmap and the bitmap in
// the portable roaring format; size 0 means Full. All little endian.
type RowAddrs struct {
	frags map[uint32]*roaring.Bitmap // nil value = Full
}

// NewRowAddrs returns an empty set.
func NewRowAddrs() *RowAddrs { return &RowAddrs{frags: map[uint32]*roaring.Bitmap{}} }

// DecodeRowAddrs parses a serialized RowAddrTreeMap.
func DecodeRowAddrs(b []byte) (*RowAddrs, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: row address set of %d bytes", ErrCorrupt, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	s := &RowAddrs{frags: make(map[uint32]*roaring.Bitmap, min(n, 1024))}
	var prev int64 = -1
	for i := uint32(0); i < n; i++ {
		if len(b) < 8 {
			return nil, fmt.Errorf("%w: row address set: fragment entry %d of %d truncated", ErrCorrupt, i, n)
		}
		frag, size := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		b = b[8:]
		if int64(frag) <= prev {
			return nil, fmt.Errorf("%w: row address set: fragment %d after %d", ErrCorrupt, frag, prev)
		}
		prev = int64(frag)
		if size == 0 {
			s.frags[frag] = nil
			continue
		}
		if uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: row address set: fragment %d bitmap of %d bytes, %d left", ErrCorrupt, frag, size, len(b))
		}
		bm := roaring.New()
		if _, err := bm.ReadFrom(bytes.NewReader(b[:size])); err != nil {
			return nil, fmt.Errorf("%w: row address set: fragment %d bitmap: %v", ErrCorrupt, frag, err)
		}
		s.frags[frag] = bm
		b = b[size:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: row address set: %d trailing bytes", ErrCorrupt, len(b))
	}
	return s, nil
}

// Add inserts one row address.
func (s *RowAddrs) Add(addr uint64) {
	frag := uint32(addr >> 32)
	bm, ok := s.frags[frag]
	if ok && bm == nil {
		return // Full already
	}
	if !ok {
		bm = roaring.New()
		s.frags[frag] = bm
	}
	bm.Add(uint32(addr))
}

// Fragments returns the fragment ids in ascending order.
func (s *RowAddrs) Fragments() []uint32 {
	ids := make([]uint32, 0, len(s.frags))
	for id := range s.frags {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Fragment returns a fragment's offsets; full reports a Full entry (then bm
// is nil); ok is false when the fragment has no entry.
func (s *RowAddrs) Fragment(id uint32) (bm *roaring.Bitmap, full, ok bool) {
	bm, ok = s.frags[id]
	return bm, ok && bm == nil, ok
}

// Len is the number of addresses, and false when some fragment is Full
// (its size is not known here).
func (s *RowAddrs) Len() (uint64, bool) {
	var n uint64
	for _, bm := range s.frags {
		if bm == nil {
			return n, false
		}
		n += bm.GetCardinality()
	}
	return n, true
}

// Encode serializes the set as Lance does. Empty fragment bitmaps are left
// out (Lance never writes one: size 0 means Full).
func (s *RowAddrs) Encode() ([]byte, error) {
	ids := s.Fragments()
	var buf bytes.Buffer
	var n uint32
	for _, id := range ids {
		if bm := s.frags[id]; bm == nil || !bm.IsEmpty() {
			n++
		}
	}
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:4], n)
	buf.Write(hdr[:4])
	for _, id := range ids {
		bm := s.frags[id]
		if bm != nil && bm.IsEmpty() {
			continue
		}
		binary.LittleEndian.PutUint32(hdr[:4], id)
		if bm == nil {
			binary.LittleEndian.PutUint32(hdr[4:], 0)
			buf.Write(hdr[:])
			continue
		}
		// Lance's reader (the roaring crate) takes the portable format; a
		// set built by Add holds array and bitmap containers only.
		size := bm.GetSerializedSizeInBytes()
		if size > 1<<32-1 {
			return nil, fmt.Errorf("%w: fragment %d bitmap of %d bytes", ErrUnsupported, id, size)
		}
		binary.LittleEndian.PutUint32(hdr[4:], uint32(size))
		buf.Write(hdr[:])
		if _, err := bm.WriteTo(&buf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Remap passes every address through m: dropped rows leave the set, moved
// rows go to their new fragment. A fragment the mapping does not rewrite is
// kept as it is (Full included); a Full fragment that it rewrites cannot be
// enumerated here and is refused with ErrUnsupported (Lance's own remap
// cannot enumerate it either). rewritten reports whether a fragment is an
// input of the rewrite; nil means "ask m for every address".
func (s *RowAddrs) Remap(m index.Mapping, rewritten func(frag uint64) bool) (*RowAddrs, uint64, error) {
	out := NewRowAddrs()
	var dropped uint64
	for _, id := range s.Fragments() {
		bm := s.frags[id]
		if rewritten != nil && !rewritten(uint64(id)) {
			if old, ok := out.frags[id]; ok && old != nil && bm != nil {
				old.Or(bm)
			} else if !ok || bm == nil {
				if bm != nil {
					bm = bm.Clone()
				}
				out.frags[id] = bm
			}
			continue
		}
		if bm == nil {
			return nil, 0, fmt.Errorf("%w: the index selects every row of fragment %d (a Full entry), which the rewrite moves", ErrUnsupported, id)
		}
		it := bm.Iterator()
		for it.HasNext() {
			old := uint64(id)<<32 | uint64(it.Next())
			nw, ok := m.Map(old)
			if !ok {
				dropped++
				continue
			}
			out.Add(nw)
		}
	}
	return out, dropped, nil
}

// Union adds every address of o (a Full fragment stays or becomes Full).
func (s *RowAddrs) Union(o *RowAddrs) {
	for id, bm := range o.frags {
		cur, ok := s.frags[id]
		switch {
		case ok && cur == nil:
		case bm == nil:
			s.frags[id] = nil
		case ok:
			cur.Or(bm)
		default:
			s.frags[id] = bm.Clone()
		}
	}
}
