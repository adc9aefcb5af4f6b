package lancewrite

import (
	"math/bits"

	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// levels is the rep/def description of one page of a leaf.
type levels struct {
	layers  []enc21pb.RepDefLayer // innermost first, as the protobuf lists them
	maxRep  uint16
	maxDef  uint16
	rep     []uint16 // nil without list layers
	def     []uint16 // nil if no layer has a null or empty list
	visible []bool   // nil: every entry owns a value slot
	entries int
}

// buildLevels picks the page's layer kinds from the codes actually used
// (a nullable layer without nulls is ALL_VALID, as lance writes it) and maps
// the level codes to def levels: the outermost layer gets the highest level.
func (l *leaf) buildLevels() levels {
	depth := len(l.path)
	used := make([]bool, 2+2*depth)
	for _, c := range l.codes {
		used[c] = true
	}
	type lay struct {
		kind        enc21pb.RepDefLayer
		nlev        uint16
		null, empty uint16
	}
	lays := make([]lay, depth)
	var maxDef uint16
	for d, p := range l.path {
		nu, em := used[1+2*d], used[2+2*d]
		switch {
		case p.kind != kindList && nu:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_NULLABLE_ITEM, nlev: 1}
		case p.kind != kindList:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_ALL_VALID_ITEM}
		case nu && em:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST, nlev: 2}
		case nu:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST, nlev: 1}
		case em:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST, nlev: 1}
		default:
			lays[d] = lay{kind: enc21pb.RepDefLayer_REPDEF_ALL_VALID_LIST}
		}
		maxDef += lays[d].nlev
	}
	remap := make([]uint16, 2+2*depth)
	cur := maxDef
	for d := range lays {
		switch lays[d].kind {
		case enc21pb.RepDefLayer_REPDEF_NULLABLE_ITEM, enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST:
			remap[1+2*d] = cur
		case enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST:
			remap[2+2*d] = cur
		case enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
			remap[1+2*d], remap[2+2*d] = cur-1, cur
		}
		cur -= lays[d].nlev
	}
	lv := levels{maxRep: l.maxRep, maxDef: maxDef}
	for d := depth - 1; d >= 0; d-- {
		lv.layers = append(lv.layers, lays[d].kind)
	}
	if l.maxRep > 0 {
		lv.rep = l.rep
		lv.visible = l.visible
		lv.entries = len(l.rep)
	} else {
		lv.entries = int(l.rows)
	}
	if maxDef > 0 {
		lv.def = make([]uint16, lv.entries)
		if len(l.codes) == lv.entries {
			for i, c := range l.codes {
				lv.def[i] = remap[c]
			}
		}
	}
	return lv
}

func bitLen16(v uint16) int { return bits.Len16(v) }
