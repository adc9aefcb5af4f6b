package lancefile

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// page is one decoded 2.1 page of a leaf column: rep/def level entries and
// the visible value slots.
type page struct {
	rows    int
	entries int
	rep     []uint16 // nil: no repetition
	def     []uint16 // nil: see defFill
	// defFill is the def level of every entry when def is nil (0: valid).
	defFill uint16
	layers  []enc21pb.RepDefLayer
	vals    values
	maxRep  int
	// rowStart[r] is the entry index where row r starts (len rows+1); nil when
	// there is no repetition (entry r is row r).
	rowStart []int32
	// visBefore[r] is the number of visible values before row r (len rows+1);
	// nil when every entry is visible.
	visBefore []int32
}

func layerDefLevels(l enc21pb.RepDefLayer) int {
	switch l {
	case enc21pb.RepDefLayer_REPDEF_NULLABLE_ITEM, enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST, enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST:
		return 1
	case enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
		return 2
	}
	return 0
}

func isListLayer(l enc21pb.RepDefLayer) bool {
	switch l {
	case enc21pb.RepDefLayer_REPDEF_ALL_VALID_LIST, enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST,
		enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST, enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
		return true
	}
	return false
}

func checkLayers(ls []enc21pb.RepDefLayer) error {
	if len(ls) == 0 {
		return fmt.Errorf("%w: page has no rep/def layers", ErrCorrupt)
	}
	for _, l := range ls {
		if l < enc21pb.RepDefLayer_REPDEF_ALL_VALID_ITEM || l > enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST {
			return fmt.Errorf("%w: rep/def layer %v", ErrUnsupportedEncoding, l)
		}
	}
	return nil
}

// maxVisibleDef is the sum of def levels of the layers inside the innermost
// list: entries with def above it own no value slot.
func maxVisibleDef(ls []enc21pb.RepDefLayer) int {
	m := 0
	for _, l := range ls {
		if isListLayer(l) {
			break
		}
		m += layerDefLevels(l)
	}
	return m
}

// hasUnknown reports unknown protobuf fields anywhere in m (a newer format).
func hasUnknown(m proto.Message) bool {
	found := false
	var walk func(r protoreflect.Message)
	walk = func(r protoreflect.Message) {
		if len(r.GetUnknown()) > 0 {
			found = true
			return
		}
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				walk(v.Message())
			}
			return !found
		})
	}
	walk(m.ProtoReflect())
	return found
}

// decodePage21 reads and decodes page pi of column ci.
func (f *File) decodePage21(ci, pi int) (*page, error) {
	p, err := f.decodePage21Inner(ci, pi)
	if err != nil {
		return nil, fmt.Errorf("%s: column %d page %d: %w", f.name, ci, pi, wrapCorrupt(err))
	}
	return p, nil
}

// wrapCorrupt makes codec errors match ErrCorrupt too.
func wrapCorrupt(err error) error {
	if errors.Is(err, codec.ErrCorrupt) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

func (f *File) pageLayout(ci, pi int) (*enc21pb.PageLayout, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	a, err := PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, err
	}
	if anyTypeName(a) != typeURLPageLayout21 {
		return nil, fmt.Errorf("%w: page encoding %q in a 2.1 file", ErrUnsupportedEncoding, a.GetTypeUrl())
	}
	pl := &enc21pb.PageLayout{}
	if err := proto.Unmarshal(a.GetValue(), pl); err != nil {
		return nil, fmt.Errorf("%w: decode page layout: %v", ErrCorrupt, err)
	}
	if hasUnknown(pl) {
		return nil, fmt.Errorf("%w: page layout has fields unknown to format 2.1", ErrUnsupportedEncoding)
	}
	return pl, nil
}

func (f *File) decodePage21Inner(ci, pi int) (*page, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	pl, err := f.pageLayout(ci, pi)
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(pg.GetBufferOffsets()))
	for i, b := range PageBuffers(pg) {
		if bufs[i], err = f.ReadBuffer(b); err != nil {
			return nil, err
		}
	}
	if pg.GetLength() > 1<<31 {
		return nil, fmt.Errorf("%w: page of %d rows", ErrCorrupt, pg.GetLength())
	}
	rows := int(pg.GetLength())
	var p *page
	switch l := pl.GetLayout().(type) {
	case *enc21pb.PageLayout_MiniBlockLayout:
		p, err = decodeMiniBlock(l.MiniBlockLayout, bufs)
	case *enc21pb.PageLayout_FullZipLayout:
		p, err = decodeFullZip(l.FullZipLayout, bufs, rows)
	case *enc21pb.PageLayout_AllNullLayout:
		p, err = decodeAllNull(l.AllNullLayout, bufs, rows)
	case *enc21pb.PageLayout_BlobLayout:
		return nil, fmt.Errorf("%w: blob layout", ErrUnsupportedEncoding)
	default:
		return nil, fmt.Errorf("%w: page layout %T", ErrUnsupportedEncoding, pl.GetLayout())
	}
	if err != nil {
		return nil, err
	}
	p.rows = rows
	return p, p.index()
}

// index validates counts and builds rowStart/visBefore.
func (p *page) index() error {
	if err := checkLayers(p.layers); err != nil {
		return err
	}
	for _, l := range p.layers {
		if isListLayer(l) {
			p.maxRep++
		}
	}
	if p.rep != nil && len(p.rep) != p.entries || p.def != nil && len(p.def) != p.entries {
		return fmt.Errorf("%w: %d entries but %d rep / %d def levels", ErrCorrupt, p.entries, len(p.rep), len(p.def))
	}
	maxDef := 0
	for _, l := range p.layers {
		maxDef += layerDefLevels(l)
	}
	for i, d := range p.def {
		if int(d) > maxDef {
			return fmt.Errorf("%w: def level %d at entry %d exceeds max %d", ErrCorrupt, d, i, maxDef)
		}
	}
	if p.maxRep == 0 {
		if p.rep != nil {
			for _, r := range p.rep {
				if r != 0 {
					return fmt.Errorf("%w: repetition levels without list layers", ErrCorrupt)
				}
			}
			p.rep = nil
		}
		if p.entries != p.rows || p.vals.n != p.rows {
			return fmt.Errorf("%w: %d rows but %d entries / %d values", ErrCorrupt, p.rows, p.entries, p.vals.n)
		}
		return nil
	}
	if p.rep == nil {
		return fmt.Errorf("%w: list layers without repetition levels", ErrCorrupt)
	}
	mvd := maxVisibleDef(p.layers)
	p.rowStart = make([]int32, 0, p.rows+1)
	p.visBefore = make([]int32, 0, p.rows+1)
	vis := int32(0)
	for i, r := range p.rep {
		if int(r) > p.maxRep {
			return fmt.Errorf("%w: rep level %d at entry %d exceeds max %d", ErrCorrupt, r, i, p.maxRep)
		}
		if int(r) == p.maxRep {
			p.rowStart = append(p.rowStart, int32(i))
			p.visBefore = append(p.visBefore, vis)
		} else if i == 0 {
			return fmt.Errorf("%w: first entry has rep level %d, want %d", ErrCorrupt, r, p.maxRep)
		}
		if p.def == nil || int(p.def[i]) <= mvd {
			vis++
		}
	}
	p.rowStart = append(p.rowStart, int32(p.entries))
	p.visBefore = append(p.visBefore, vis)
	if len(p.rowStart)-1 != p.rows {
		return fmt.Errorf("%w: repetition levels hold %d rows, page length is %d", ErrCorrupt, len(p.rowStart)-1, p.rows)
	}
	if int(vis) != p.vals.n {
		return fmt.Errorf("%w: %d visible entries but %d values", ErrCorrupt, vis, p.vals.n)
	}
	return nil
}
