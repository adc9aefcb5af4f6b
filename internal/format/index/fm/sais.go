package fm

// Suffix array construction by induced sorting (SA-IS: G. Nong, S. Zhang,
// W. H. Chan, "Two Efficient Algorithms for Linear Time Suffix Array
// Construction", IEEE Trans. Computers 60(10), 2011).
//
// The suffix array of a text is unique, so this gives exactly the array
// lance builds with libsais; the standard library's index/suffixarray
// builds one too but does not hand it out.
//
// A virtual sentinel, smaller than every symbol, follows the text. Memory:
// the suffix array (4 bytes per text byte), one bit per symbol for the
// suffix types, one counter per alphabet symbol; the reduced problem of a
// recursion lives in the suffix array's own space (at most half of it).

// suffixArray fills sa (len(sa) == len(text), len(text) < 2^31) with the
// suffix array of text.
func suffixArray(text []byte, sa []int32) {
	sais(text, sa, 256)
}

// typeBits holds one bit per position: set for an S-type suffix (smaller
// than the suffix after it), clear for L-type.
type typeBits []uint64

func (t typeBits) s(i int) bool { return t[i>>6]>>(uint(i)&63)&1 != 0 }
func (t typeBits) set(i int)    { t[i>>6] |= 1 << (uint(i) & 63) }

// lms reports whether i starts a leftmost-S suffix: S-type after an L-type.
func (t typeBits) lms(i int) bool { return i > 0 && t.s(i) && !t.s(i-1) }

// sais computes the suffix array of s over the alphabet [0, k).
func sais[T byte | int32](s []T, sa []int32, k int) {
	n := len(s)
	switch n {
	case 0:
		return
	case 1:
		sa[0] = 0
		return
	}
	// Suffix types, right to left: the last suffix is L (the sentinel
	// after it is smaller); a suffix is S when its first symbol is smaller
	// than the next one's, or equal to it and the next suffix is S.
	t := make(typeBits, (n+63)/64)
	for i := n - 2; i >= 0; i-- {
		if s[i] < s[i+1] || s[i] == s[i+1] && t.s(i+1) {
			t.set(i)
		}
	}
	count := make([]int32, k)
	for _, c := range s {
		count[c]++
	}
	bkt := make([]int32, k)

	// Stage 1: sort the LMS substrings. Seed every LMS position at the
	// end of its bucket, then induce.
	for i := range sa {
		sa[i] = -1
	}
	bucketEnds(count, bkt)
	for i := 1; i < n; i++ {
		if t.lms(i) {
			bkt[s[i]]--
			sa[bkt[s[i]]] = int32(i)
		}
	}
	induce(s, sa, t, count, bkt)

	// The LMS positions, now in the order of their substrings, move to
	// the front.
	m := 0
	for _, p := range sa {
		if t.lms(int(p)) {
			sa[m] = p
			m++
		}
	}
	// Name each LMS substring by its rank among the distinct ones; the
	// name of position p goes to sa[m+p/2] (LMS positions are at least
	// two apart, so these slots are distinct and past the sorted ones).
	for i := m; i < n; i++ {
		sa[i] = -1
	}
	names := int32(0)
	prev := -1
	for i := 0; i < m; i++ {
		p := int(sa[i])
		if prev < 0 || !sameLMS(s, t, prev, p) {
			names++
		}
		prev = p
		sa[m+p/2] = names - 1
	}
	// The names in text order form the reduced string, kept in the last m
	// slots.
	j := n
	for i := n - 1; i >= m; i-- {
		if sa[i] >= 0 {
			j--
			sa[j] = sa[i]
		}
	}
	s1, sa1 := sa[n-m:], sa[:m]

	// Stage 2: the suffix array of the reduced string orders the LMS
	// suffixes. Distinct names give it directly; else recurse.
	if int(names) < m {
		sais(s1, sa1, int(names))
	} else {
		for i, c := range s1 {
			sa1[c] = int32(i)
		}
	}
	// Reduced positions back to text positions: the LMS positions in text
	// order overwrite the reduced string.
	j = 0
	for i := 1; i < n; i++ {
		if t.lms(i) {
			s1[j] = int32(i)
			j++
		}
	}
	for i := range sa1 {
		sa1[i] = s1[sa1[i]]
	}

	// Stage 3: seed the sorted LMS suffixes at their bucket ends, largest
	// first, and induce the whole array.
	for i := m; i < n; i++ {
		sa[i] = -1
	}
	bucketEnds(count, bkt)
	for i := m - 1; i >= 0; i-- {
		p := sa[i]
		sa[i] = -1
		bkt[s[p]]--
		sa[bkt[s[p]]] = p
	}
	induce(s, sa, t, count, bkt)
}

// induce sorts the L-type suffixes from the seeded LMS ones (left to
// right, from bucket starts), then the S-type ones from the L-type ones
// (right to left, from bucket ends).
func induce[T byte | int32](s []T, sa []int32, t typeBits, count, bkt []int32) {
	n := len(s)
	bucketStarts(count, bkt)
	// The suffix before the sentinel is L-type and comes first in its
	// bucket.
	last := s[n-1]
	sa[bkt[last]] = int32(n - 1)
	bkt[last]++
	for i := 0; i < n; i++ {
		j := sa[i] - 1
		if j >= 0 && !t.s(int(j)) {
			c := s[j]
			sa[bkt[c]] = j
			bkt[c]++
		}
	}
	bucketEnds(count, bkt)
	for i := n - 1; i >= 0; i-- {
		j := sa[i] - 1
		if j >= 0 && t.s(int(j)) {
			c := s[j]
			bkt[c]--
			sa[bkt[c]] = j
		}
	}
}

// sameLMS reports whether the LMS substrings at p and q (each up to and
// including the next LMS position, or the sentinel) are equal.
func sameLMS[T byte | int32](s []T, t typeBits, p, q int) bool {
	n := len(s)
	for d := 0; ; d++ {
		a, b := p+d, q+d
		if a == n || b == n {
			// The sentinel is unique: a substring that reaches it
			// equals no other.
			return false
		}
		if s[a] != s[b] || t.s(a) != t.s(b) {
			return false
		}
		if d > 0 {
			la, lb := t.lms(a), t.lms(b)
			if la || lb {
				return la && lb
			}
		}
	}
}

// bucketStarts sets bkt[c] to the first slot of symbol c's bucket.
func bucketStarts(count, bkt []int32) {
	var sum int32
	for c, n := range count {
		bkt[c] = sum
		sum += n
	}
}

// bucketEnds sets bkt[c] to one past the last slot of symbol c's bucket.
func bucketEnds(count, bkt []int32) {
	var sum int32
	for c, n := range count {
		sum += n
		bkt[c] = sum
	}
}
