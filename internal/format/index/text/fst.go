package text

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The token dictionary of lance 8.0.0 (token_set_format "fst") is an FST map
// (token bytes -> token id) serialized by the Rust fst crate, version 3:
// a 16-byte header (u64 version, u64 type), nodes written bottom-up (a
// node's address is the offset of its last byte, its state byte), then u64
// key count, u64 root address and a u32 masked CRC-32C of everything
// before it. Node layouts: https://github.com/BurntSushi/fst/blob/master/src/raw/node.rs,
// builder: https://github.com/BurntSushi/fst/blob/master/src/raw/build.rs.
// fstReader iterates a map in key order; fstBuilder writes one, with the
// same node encodings and the same bounded node registry (an FNV-1a hashed
// table of 10,000 two-entry MRU buckets) as the crate, so the same keys and
// values give the same bytes.

const (
	fstVersion      = 3
	fstEmptyAddr    = 0 // the final node with no transitions and no output
	fstNoneAddr     = 1 // no node
	fstIndexedTrans = 32
)

// errFST marks token dictionary bytes that are not an fst map.
var errFST = errors.New("fst")

// fstCommonInv lists the 63 most common input bytes first: a node whose
// input is among them stores its index in the state byte.
var fstCommonInv = [256]byte{
	0x74, 0x65, 0x2f, 0x6f, 0x61, 0x73, 0x72, 0x69, 0x70, 0x63, 0x6e, 0x77, 0x2e, 0x68, 0x6c, 0x6d,
	0x2d, 0x64, 0x75, 0x30, 0x31, 0x32, 0x67, 0x3d, 0x3a, 0x62, 0x66, 0x33, 0x79, 0x35, 0x26, 0x5f,
	0x34, 0x76, 0x39, 0x36, 0x37, 0x38, 0x6b, 0x25, 0x3f, 0x78, 0x43, 0x44, 0x41, 0x53, 0x46, 0x49,
	0x42, 0x45, 0x6a, 0x50, 0x54, 0x7a, 0x52, 0x4e, 0x4d, 0x2b, 0x4c, 0x4f, 0x71, 0x48, 0x47, 0x57,
	0x55, 0x56, 0x2c, 0x59, 0x4b, 0x4a, 0x5a, 0x58, 0x51, 0x3b, 0x29, 0x28, 0x7e, 0x5b, 0x5d, 0x24,
	0x21, 0x27, 0x2a, 0x40, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
	0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b,
	0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x22, 0x23, 0x3c, 0x3e, 0x5c, 0x5e, 0x60, 0x7b, 0x7c, 0x7d, 0x7f,
	0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
	0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
	0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
	0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
	0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
	0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
	0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef,
	0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
}

var fstCommon = func() (c [256]byte) {
	for i, b := range fstCommonInv {
		c[b] = byte(i)
	}
	return c
}()

func fstCommonIdx(in byte, max byte) byte {
	v := byte((uint32(fstCommon[in]) + 1) % 256)
	if v > max {
		return 0
	}
	return v
}

func fstCommonInput(idx byte) (byte, bool) {
	if idx == 0 {
		return 0, false
	}
	return fstCommonInv[idx-1], true
}

func packSize(n uint64) int {
	s := 1
	for n >= 1<<8 && s < 8 {
		n >>= 8
		s++
	}
	return s
}

func unpackUint(b []byte, n int) uint64 {
	var v uint64
	for i := 0; i < n; i++ {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

func appendUint(b []byte, v uint64, n int) []byte {
	for i := 0; i < n; i++ {
		b = append(b, byte(v))
		v >>= 8
	}
	return b
}

type fstTrans struct {
	in   byte
	out  uint64
	addr int
}

type fstNode struct {
	final    bool
	finalOut uint64
	trans    []fstTrans
}

// fstReader reads a serialized fst map.
type fstReader struct {
	data    []byte
	version uint64
	root    int
	len     uint64
}

func newFSTReader(b []byte) (*fstReader, error) {
	if len(b) < 32 {
		return nil, fmt.Errorf("%w: %d bytes", errFST, len(b))
	}
	r := &fstReader{data: b, version: binary.LittleEndian.Uint64(b)}
	if r.version < 2 || r.version > fstVersion {
		return nil, fmt.Errorf("%w: version %d", errFST, r.version)
	}
	end := len(b)
	if r.version >= 3 {
		end -= 4
		if got, want := fstChecksum(b[:end]), binary.LittleEndian.Uint32(b[end:]); got != want {
			return nil, fmt.Errorf("%w: checksum %08x, want %08x", errFST, got, want)
		}
	}
	r.root = int(binary.LittleEndian.Uint64(b[end-8:]))
	r.len = binary.LittleEndian.Uint64(b[end-16:])
	r.data = b[:end-16]
	if r.root != fstEmptyAddr && (r.root < 16 || r.root >= len(r.data)) {
		return nil, fmt.Errorf("%w: root address %d of %d bytes", errFST, r.root, len(r.data))
	}
	return r, nil
}

func fstChecksum(b []byte) uint32 {
	s := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	return (s>>15 | s<<17) + 0xA282EAD8
}

// node decodes the node at addr. Every offset is bounds-checked: the bytes
// come from outside.
func (r *fstReader) node(addr int, n *fstNode) error {
	n.final, n.finalOut, n.trans = false, 0, n.trans[:0]
	if addr == fstEmptyAddr {
		n.final = true
		return nil
	}
	v, ok := r.at(addr)
	if !ok {
		return fstOutOfBounds(addr)
	}
	var err error
	if v>>7 == 1 {
		err = r.oneTransNode(addr, v, n)
	} else {
		err = r.anyTransNode(addr, v, n)
	}
	if err != nil {
		return err
	}
	for _, t := range n.trans {
		if t.addr != fstEmptyAddr && t.addr >= addr {
			return fmt.Errorf("%w: node at %d points forward to %d", errFST, addr, t.addr)
		}
	}
	return nil
}

func fstOutOfBounds(addr int) error {
	return fmt.Errorf("%w: node at %d runs out of bounds", errFST, addr)
}

// oneTransNode decodes a node with state byte v and one transition.
func (r *fstReader) oneTransNode(addr int, v byte, n *fstNode) error {
	// The input is in the state byte when common, else in the byte before it.
	in, common := fstCommonInput(v & 0x3f)
	ilen := 0
	if !common {
		ilen = 1
		var ok bool
		if in, ok = r.at(addr - 1); !ok {
			return fstOutOfBounds(addr)
		}
	}
	if v>>6 == 0b11 { // to the node just before, no output
		end := addr - ilen
		n.trans = append(n.trans, fstTrans{in: in, addr: end - 1})
		return nil
	}
	tsize, osize, ok := r.sizes(addr - ilen - 1)
	if !ok {
		return fstOutOfBounds(addr)
	}
	end := addr - ilen - 1 - tsize - osize
	t := fstTrans{in: in}
	if t.addr, ok = r.delta(addr-ilen-1-tsize, tsize, end); !ok {
		return fstOutOfBounds(addr)
	}
	if osize > 0 {
		b, ok := r.slice(addr-ilen-1-tsize-osize, osize)
		if !ok {
			return fstOutOfBounds(addr)
		}
		t.out = unpackUint(b, osize)
	}
	n.trans = append(n.trans, t)
	return nil
}

// anyTransNode decodes a node with state byte v and any number of
// transitions, maybe final.
func (r *fstReader) anyTransNode(addr int, v byte, n *fstNode) error {
	n.final = v&0x40 != 0
	ntrans, nlen := int(v&0x3f), 0
	if ntrans == 0 {
		nlen = 1
		b, ok := r.at(addr - 1)
		if !ok {
			return fstOutOfBounds(addr)
		}
		ntrans = int(b)
		if ntrans == 1 {
			ntrans = 256
		}
	}
	tsize, osize, ok := r.sizes(addr - nlen - 1)
	if !ok {
		return fstOutOfBounds(addr)
	}
	index := 0
	if r.version >= 2 && ntrans > fstIndexedTrans {
		index = 256
	}
	transSize := ntrans + ntrans*tsize + index
	finalOsize := 0
	if n.final {
		finalOsize = osize
	}
	end := addr - nlen - 1 - transSize - ntrans*osize - finalOsize
	if end < 16 {
		return fstOutOfBounds(addr)
	}
	if n.final && osize > 0 {
		b, _ := r.slice(end, osize)
		n.finalOut = unpackUint(b, osize)
	}
	for i := 0; i < ntrans; i++ {
		t := fstTrans{}
		if t.in, ok = r.at(addr - nlen - 1 - index - i - 1); !ok {
			return fstOutOfBounds(addr)
		}
		if t.addr, ok = r.delta(addr-nlen-1-index-ntrans-i*tsize-tsize, tsize, end); !ok {
			return fstOutOfBounds(addr)
		}
		if osize > 0 {
			b, ok := r.slice(addr-nlen-1-transSize-i*osize-osize, osize)
			if !ok {
				return fstOutOfBounds(addr)
			}
			t.out = unpackUint(b, osize)
		}
		n.trans = append(n.trans, t)
	}
	return nil
}

// at is the byte at i, if i is inside the node area (past the 16-byte header).
func (r *fstReader) at(i int) (byte, bool) {
	if i < 16 || i >= len(r.data) {
		return 0, false
	}
	return r.data[i], true
}

// slice is the n bytes at i, if they are inside the node area.
func (r *fstReader) slice(i, n int) ([]byte, bool) {
	if i < 16 || n < 0 || i+n > len(r.data) {
		return nil, false
	}
	return r.data[i : i+n], true
}

// sizes reads a pack-sizes byte: transition address and output widths.
func (r *fstReader) sizes(i int) (int, int, bool) {
	ps, ok := r.at(i)
	t, o := int(ps>>4), int(ps&15)
	return t, o, ok && t <= 8 && o <= 8
}

// delta reads a size-byte transition address at i, stored as its distance
// back from end.
func (r *fstReader) delta(i, size, end int) (int, bool) {
	if size == 0 {
		return fstEmptyAddr, true
	}
	b, ok := r.slice(i, size)
	if !ok {
		return 0, false
	}
	dv := int(unpackUint(b, size))
	if dv == fstEmptyAddr {
		return fstEmptyAddr, true
	}
	if dv > end {
		return 0, false
	}
	return end - dv, true
}

// each calls fn with every key and value in key order. The key slice is
// reused between calls.
func (r *fstReader) each(fn func(key []byte, val uint64) error) error {
	type frame struct {
		node fstNode
		next int
		out  uint64
	}
	var stack []*frame
	var key []byte
	push := func(addr int, out uint64) (*frame, error) {
		if len(stack) > 1<<16 {
			return nil, fmt.Errorf("%w: keys longer than 65536 bytes", errFST)
		}
		f := &frame{out: out}
		if err := r.node(addr, &f.node); err != nil {
			return nil, err
		}
		if !f.node.final && len(f.node.trans) == 0 && len(stack) > 0 {
			// Every path of a built fst ends in a final node.
			return nil, fmt.Errorf("%w: dead-end node at %d", errFST, addr)
		}
		stack = append(stack, f)
		return f, nil
	}
	f, err := push(r.root, 0)
	if err != nil {
		return err
	}
	var n uint64
	emit := func(out uint64) error {
		if n++; n > r.len {
			return fmt.Errorf("%w: more than the %d keys the footer says", errFST, r.len)
		}
		return fn(key, out)
	}
	if f.node.final {
		if err := emit(f.out + f.node.finalOut); err != nil {
			return err
		}
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next == len(f.node.trans) {
			stack = stack[:len(stack)-1]
			if len(key) > 0 {
				key = key[:len(key)-1]
			}
			continue
		}
		t := f.node.trans[f.next]
		f.next++
		key = append(key, t.in)
		c, err := push(t.addr, f.out+t.out)
		if err != nil {
			return err
		}
		if c.node.final {
			if err := emit(c.out + c.node.finalOut); err != nil {
				return err
			}
		}
	}
	if n != r.len {
		return fmt.Errorf("%w: %d keys, header says %d", errFST, n, r.len)
	}
	return nil
}

// fstBuilder writes an fst map; keys must be added in strictly increasing
// order. The output is built in memory (lance stores it as one value).
type fstBuilder struct {
	buf      []byte
	stack    []fstUnfinished
	reg      fstRegistry
	last     []byte
	hasLast  bool
	lastAddr int
	len      uint64
}

type fstUnfinished struct {
	node    fstNode
	hasLast bool
	lastIn  byte
	lastOut uint64
}

func newFSTBuilder() *fstBuilder {
	b := &fstBuilder{lastAddr: fstNoneAddr, reg: newFSTRegistry(10000, 2)}
	b.buf = binary.LittleEndian.AppendUint64(b.buf, fstVersion)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, 0)
	b.stack = append(b.stack, fstUnfinished{})
	return b
}

func (b *fstBuilder) insert(key []byte, val uint64) error {
	if b.hasLast && string(key) <= string(b.last) {
		return fmt.Errorf("%w: key %q added after %q", errFST, key, b.last)
	}
	b.last, b.hasLast = append(b.last[:0], key...), true
	if len(key) == 0 {
		b.len = 1
		b.stack[0].node.final = true
		b.stack[0].node.finalOut = val
		return nil
	}
	// Walk the common prefix, pushing output differences down.
	out := val
	i := 0
	for i < len(key) {
		u := &b.stack[i]
		if !u.hasLast || u.lastIn != key[i] {
			break
		}
		i++
		common := min(u.lastOut, out)
		add := u.lastOut - common
		out -= common
		u.lastOut = common
		if add != 0 {
			n := &b.stack[i]
			if n.node.final {
				n.node.finalOut += add
			}
			for k := range n.node.trans {
				n.node.trans[k].out += add
			}
			if n.hasLast {
				n.lastOut += add
			}
		}
	}
	b.len++
	b.compileFrom(i)
	// Add the suffix.
	top := &b.stack[len(b.stack)-1]
	top.hasLast, top.lastIn, top.lastOut = true, key[i], out
	for _, c := range key[i+1:] {
		b.stack = append(b.stack, fstUnfinished{hasLast: true, lastIn: c})
	}
	b.stack = append(b.stack, fstUnfinished{node: fstNode{final: true}})
	return nil
}

func (u *fstUnfinished) freeze(addr int) {
	if u.hasLast {
		u.node.trans = append(u.node.trans, fstTrans{in: u.lastIn, out: u.lastOut, addr: addr})
		u.hasLast = false
	}
}

func (b *fstBuilder) compileFrom(istate int) {
	addr := fstNoneAddr
	for istate+1 < len(b.stack) {
		u := b.stack[len(b.stack)-1]
		b.stack = b.stack[:len(b.stack)-1]
		if addr != fstNoneAddr {
			u.freeze(addr)
		}
		addr = b.compile(&u.node)
	}
	b.stack[len(b.stack)-1].freeze(addr)
}

func (b *fstBuilder) compile(n *fstNode) int {
	if n.final && len(n.trans) == 0 && n.finalOut == 0 {
		return fstEmptyAddr
	}
	cell, found := b.reg.entry(n)
	if found {
		return cell.addr
	}
	start := len(b.buf)
	b.encode(n, start)
	b.lastAddr = len(b.buf) - 1
	if cell != nil {
		cell.addr = b.lastAddr
	}
	return b.lastAddr
}

func deltaOf(node, trans int) uint64 {
	if trans == fstEmptyAddr {
		return fstEmptyAddr
	}
	return uint64(node - trans)
}

func (b *fstBuilder) encode(n *fstNode, addr int) {
	if len(n.trans) == 1 && !n.final {
		t := n.trans[0]
		if t.addr == b.lastAddr && t.out == 0 {
			st := 0b11_000000 | fstCommonIdx(t.in, 0x3f)
			if st&0x3f == 0 {
				b.buf = append(b.buf, t.in)
			}
			b.buf = append(b.buf, st)
			return
		}
		osize := 0
		if t.out != 0 {
			osize = packSize(t.out)
			b.buf = appendUint(b.buf, t.out, osize)
		}
		tsize := packSize(deltaOf(addr, t.addr))
		b.buf = appendUint(b.buf, deltaOf(addr, t.addr), tsize)
		b.buf = append(b.buf, byte(tsize<<4|osize))
		st := 0b10_000000 | fstCommonIdx(t.in, 0x3f)
		if st&0x3f == 0 {
			b.buf = append(b.buf, t.in)
		}
		b.buf = append(b.buf, st)
		return
	}
	tsize, osize := 0, packSize(n.finalOut)
	anyOut := n.finalOut != 0
	for _, t := range n.trans {
		tsize = max(tsize, packSize(deltaOf(addr, t.addr)))
		osize = max(osize, packSize(t.out))
		anyOut = anyOut || t.out != 0
	}
	if !anyOut {
		osize = 0
	}
	var st byte
	if n.final {
		st |= 0b01_000000
	}
	if len(n.trans) <= 0x3f {
		st |= byte(len(n.trans))
	}
	if anyOut {
		if n.final {
			b.buf = appendUint(b.buf, n.finalOut, osize)
		}
		for i := len(n.trans) - 1; i >= 0; i-- {
			b.buf = appendUint(b.buf, n.trans[i].out, osize)
		}
	}
	for i := len(n.trans) - 1; i >= 0; i-- {
		b.buf = appendUint(b.buf, deltaOf(addr, n.trans[i].addr), tsize)
	}
	for i := len(n.trans) - 1; i >= 0; i-- {
		b.buf = append(b.buf, n.trans[i].in)
	}
	if len(n.trans) > fstIndexedTrans {
		var idx [256]byte
		for i := range idx {
			idx[i] = 255
		}
		for i, t := range n.trans {
			idx[t.in] = byte(i)
		}
		b.buf = append(b.buf, idx[:]...)
	}
	b.buf = append(b.buf, byte(tsize<<4|osize))
	if st&0x3f == 0 {
		if len(n.trans) == 256 {
			b.buf = append(b.buf, 1)
		} else {
			b.buf = append(b.buf, byte(len(n.trans)))
		}
	}
	b.buf = append(b.buf, st)
}

// finish writes the root and the footer and returns the bytes.
func (b *fstBuilder) finish() []byte {
	b.compileFrom(0)
	root := b.stack[0].node
	b.stack = b.stack[:0]
	addr := b.compile(&root)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, b.len)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(addr))
	return binary.LittleEndian.AppendUint32(b.buf, fstChecksum(b.buf))
}

// fstRegistry remembers recently compiled nodes so equal suffixes are
// written once: size buckets of mru cells, most recent first.
type fstRegistry struct {
	cells []fstCell
	size  int
	mru   int
}

type fstCell struct {
	addr int
	node fstNode
}

func newFSTRegistry(size, mru int) fstRegistry {
	r := fstRegistry{cells: make([]fstCell, size*mru), size: size, mru: mru}
	for i := range r.cells {
		r.cells[i].addr = fstNoneAddr
	}
	return r
}

func nodeEqual(a, b *fstNode) bool {
	if a.final != b.final || a.finalOut != b.finalOut || len(a.trans) != len(b.trans) {
		return false
	}
	for i := range a.trans {
		if a.trans[i] != b.trans[i] {
			return false
		}
	}
	return true
}

func (r *fstRegistry) hash(n *fstNode) int {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	fin := uint64(0)
	if n.final {
		fin = 1
	}
	h = (h ^ fin) * prime
	h = (h ^ n.finalOut) * prime
	for _, t := range n.trans {
		h = (h ^ uint64(t.in)) * prime
		h = (h ^ t.out) * prime
		h = (h ^ uint64(t.addr)) * prime
	}
	return int(h % uint64(r.size))
}

// entry returns (cell with the node's address, true) when an equal node was
// compiled, else (the cell that will hold it, false) after moving it to the
// front of its bucket.
func (r *fstRegistry) entry(n *fstNode) (*fstCell, bool) {
	start := r.hash(n) * r.mru
	cells := r.cells[start : start+r.mru]
	for i := range cells {
		if cells[i].addr != fstNoneAddr && nodeEqual(&cells[i].node, n) {
			c := cells[i]
			copy(cells[1:i+1], cells[:i])
			cells[0] = c
			return &cells[0], true
		}
	}
	last := len(cells) - 1
	c := cells[last]
	c.node.final, c.node.finalOut = n.final, n.finalOut
	c.node.trans = append(c.node.trans[:0], n.trans...)
	c.addr = fstNoneAddr
	copy(cells[1:], cells[:last])
	cells[0] = c
	return &cells[0], false
}
