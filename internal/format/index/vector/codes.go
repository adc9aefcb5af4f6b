package vector

// Code layouts inside one partition of the storage file.
//
// PQ (transposed): a partition of n rows with b code bytes per row stores
// byte j of row i at j*n+i (lance's transpose of the row-major codes, see
// get_pq_code in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/pq/storage.rs).
//
// RQ (packed): rows are taken in blocks of 32; within a block, code byte i
// of the 32 rows becomes 32 bytes: nibble-interleaved in the order of
// rqPerm (lance's PERM0) so the SIMD distance lookup can use them; the rows
// after the last whole block are stored transposed like PQ. See pack_codes
// and unpack_codes in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/storage.rs.

const rqBlock = 32

var rqPerm = [16]int{0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15}

// untranspose turns n rows of width b from column-major into row-major.
func untranspose(dst, src []byte, n, b int) {
	for j := 0; j < b; j++ {
		col := src[j*n : (j+1)*n]
		for i, v := range col {
			dst[i*b+j] = v
		}
	}
}

// transpose turns n rows of width b from row-major into column-major.
func transpose(dst, src []byte, n, b int) {
	for j := 0; j < b; j++ {
		col := dst[j*n : (j+1)*n]
		for i := range col {
			col[i] = src[i*b+j]
		}
	}
}

// rqUnpack turns n packed RQ codes of b bytes into row-major.
func rqUnpack(dst, src []byte, n, b int) {
	whole := n / rqBlock * rqBlock
	for blk := 0; blk < whole/rqBlock; blk++ {
		start := blk * b * rqBlock
		for i := 0; i < b; i++ {
			block := src[start+i*rqBlock : start+(i+1)*rqBlock]
			for j := 0; j < 16; j++ {
				v0, v1 := block[j], block[j+16]
				r0 := blk*rqBlock + rqPerm[j]
				r1 := r0 + 16
				dst[r0*b+i] = v0&0xf | (v1&0xf)<<4
				dst[r1*b+i] = v0>>4 | (v1>>4)<<4
			}
		}
	}
	if rest := n - whole; rest > 0 {
		untranspose(dst[whole*b:], src[whole*b:], rest, b)
	}
}

// rqPack is the inverse of rqUnpack.
func rqPack(dst, src []byte, n, b int) {
	whole := n / rqBlock * rqBlock
	var lo, hi [rqBlock]byte
	for blk := 0; blk < whole/rqBlock; blk++ {
		row := blk * rqBlock
		for i := 0; i < b; i++ {
			for k := 0; k < rqBlock; k++ {
				c := src[(row+k)*b+i]
				lo[k], hi[k] = c&0xf, c>>4
			}
			off := blk*b*rqBlock + i*rqBlock
			for j := 0; j < 16; j++ {
				p := rqPerm[j]
				dst[off+j] = lo[p] | lo[p+16]<<4
				dst[off+j+16] = hi[p] | hi[p+16]<<4
			}
		}
	}
	if rest := n - whole; rest > 0 {
		transpose(dst[whole*b:], src[whole*b:], rest, b)
	}
}
