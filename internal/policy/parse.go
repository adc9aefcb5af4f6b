package policy

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/lanced-dev/lanced/internal/duration"
	"github.com/zclconf/go-cty/cty"
)

// File is one parsed policy file.
type File struct {
	Name     string
	Defaults *Block   // nil when the file has no defaults block
	Tables   []*Block // in file order
	// HCL is the parsed file, kept for diagnostic snippets.
	HCL *hcl.File
}

// Block is one table or defaults block with the settings it sets.
type Block struct {
	// Glob is the table block's label; empty for defaults.
	Glob string
	// IsDefaults is true for the defaults block.
	IsDefaults bool
	// DeclRange is the range of the block header.
	DeclRange hcl.Range
	// values maps a setting path ("compaction.target_rows_per_fragment")
	// to its decoded value.
	values map[string]value
}

type value struct {
	v   any
	rng hcl.Range
}

// Has reports whether the block sets the setting at path.
func (b *Block) Has(path string) bool { _, ok := b.values[path]; return ok }

var fileSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "defaults"},
		{Type: "table", LabelNames: []string{"glob"}},
	},
}

var blockSchema, sectionSchemas = buildSchemas()

func buildSchemas() (*hcl.BodySchema, map[string]*hcl.BodySchema) {
	top := &hcl.BodySchema{}
	secs := map[string]*hcl.BodySchema{}
	for _, s := range sections {
		top.Blocks = append(top.Blocks, hcl.BlockHeaderSchema{Type: s})
		secs[s] = &hcl.BodySchema{}
	}
	for _, sp := range specs {
		if sp.section == "" {
			top.Attributes = append(top.Attributes, hcl.AttributeSchema{Name: sp.name})
			continue
		}
		secs[sp.section].Attributes = append(secs[sp.section].Attributes, hcl.AttributeSchema{Name: sp.name})
	}
	return top, secs
}

// Parse parses one policy file. It returns the file even with errors so
// callers can render all diagnostics; use it only when !diags.HasErrors().
func Parse(src []byte, filename string) (*File, hcl.Diagnostics) {
	hf, diags := hclsyntax.ParseConfig(src, filename, hcl.Pos{Line: 1, Column: 1, Byte: 0})
	f := &File{Name: filename, HCL: hf}
	if diags.HasErrors() || hf == nil {
		return f, diags
	}
	content, d := hf.Body.Content(fileSchema)
	diags = append(diags, d...)
	for _, blk := range content.Blocks {
		switch blk.Type {
		case "defaults":
			b, d := decodeBlock(blk, true)
			diags = append(diags, d...)
			if f.Defaults != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate defaults block",
					Detail:   fmt.Sprintf("A defaults block was already defined at %s.", f.Defaults.DeclRange),
					Subject:  blk.DefRange.Ptr(),
				})
				continue
			}
			f.Defaults = b
		case "table":
			b, d := decodeBlock(blk, false)
			diags = append(diags, d...)
			for _, prev := range f.Tables {
				if prev.Glob == b.Glob {
					diags = append(diags, &hcl.Diagnostic{
						Severity: hcl.DiagError,
						Summary:  "Duplicate table block",
						Detail:   fmt.Sprintf("A table block for %q was already defined at %s.", b.Glob, prev.DeclRange),
						Subject:  blk.LabelRanges[0].Ptr(),
					})
				}
			}
			f.Tables = append(f.Tables, b)
		}
	}
	return f, diags
}

func decodeBlock(blk *hcl.Block, isDefaults bool) (*Block, hcl.Diagnostics) {
	b := &Block{IsDefaults: isDefaults, DeclRange: blk.DefRange, values: map[string]value{}}
	var diags hcl.Diagnostics
	if !isDefaults {
		b.Glob = blk.Labels[0]
		if err := checkGlob(b.Glob); err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid table glob",
				Detail:   err.Error(),
				Subject:  blk.LabelRanges[0].Ptr(),
			})
		}
	}
	content, d := blk.Body.Content(blockSchema)
	diags = append(diags, d...)
	for _, sp := range specs {
		if sp.section != "" {
			continue
		}
		if attr, ok := content.Attributes[sp.name]; ok {
			diags = append(diags, b.decodeAttr(sp, attr)...)
		}
	}
	seen := map[string]*hcl.Block{}
	for _, sec := range content.Blocks {
		if prev, dup := seen[sec.Type]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", sec.Type),
				Detail:   fmt.Sprintf("A %s block was already defined at %s; put all its settings in one block.", sec.Type, prev.DefRange),
				Subject:  sec.DefRange.Ptr(),
			})
			continue
		}
		seen[sec.Type] = sec
		sc, d := sec.Body.Content(sectionSchemas[sec.Type])
		diags = append(diags, d...)
		for _, sp := range specs {
			if sp.section != sec.Type {
				continue
			}
			if attr, ok := sc.Attributes[sp.name]; ok {
				diags = append(diags, b.decodeAttr(sp, attr)...)
			}
		}
	}
	diags = append(diags, b.checkRanges()...)
	return b, diags
}

func checkGlob(glob string) error {
	if glob == "" {
		return fmt.Errorf("the table glob is empty; use \"**\" to match every table")
	}
	if !doublestar.ValidatePattern(glob) {
		return fmt.Errorf("%q is not a valid glob (check brackets, braces and escapes)", glob)
	}
	return nil
}

func attrErr(attr *hcl.Attribute, summary, detail string) hcl.Diagnostics {
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   detail,
		Subject:  attr.Expr.Range().Ptr(),
		Context:  attr.Range.Ptr(),
	}}
}

// decodeAttr reads one attribute as sp says and stores it.
func (b *Block) decodeAttr(sp *spec, attr *hcl.Attribute) hcl.Diagnostics {
	v, diags := decodeValue(sp, attr)
	if diags.HasErrors() {
		return diags
	}
	b.values[sp.path()] = value{v: v, rng: attr.Range}
	return diags
}

func decodeValue(sp *spec, attr *hcl.Attribute) (any, hcl.Diagnostics) {
	switch sp.kind {
	case kBool:
		var v bool
		if d := gohcl.DecodeExpression(attr.Expr, nil, &v); d.HasErrors() {
			return v, d
		}
		if why, ok := sp.refused[fmt.Sprint(v)]; ok {
			return nil, attrErr(attr, "Unsupported value", why)
		}
		return v, nil
	case kCount:
		var f float64
		if d := gohcl.DecodeExpression(attr.Expr, nil, &f); d.HasErrors() {
			return nil, d
		}
		if f != math.Trunc(f) || f < float64(sp.min) || f > math.MaxInt64 {
			return nil, attrErr(attr, "Invalid value", fmt.Sprintf("%s must be a whole number of at least %d.", sp.name, sp.min))
		}
		return uint64(f), nil
	case kFraction, kRate:
		var f float64
		if d := gohcl.DecodeExpression(attr.Expr, nil, &f); d.HasErrors() {
			return nil, d
		}
		if sp.kind == kFraction && !(f > 0 && f <= 1) {
			return nil, attrErr(attr, "Value out of range", fmt.Sprintf("%s must be in (0, 1]; got %v.", sp.name, f))
		}
		if sp.kind == kRate && !(f > 0) {
			return nil, attrErr(attr, "Value out of range", fmt.Sprintf("%s must be above 0; got %v.", sp.name, f))
		}
		return f, nil
	case kEnum:
		var s string
		if d := gohcl.DecodeExpression(attr.Expr, nil, &s); d.HasErrors() {
			return nil, d
		}
		for _, e := range sp.enum {
			if s == e {
				return s, nil
			}
		}
		if why, ok := sp.refused[s]; ok {
			return nil, attrErr(attr, "Unsupported value", why)
		}
		return nil, attrErr(attr, "Invalid value", fmt.Sprintf("%s must be one of %s; got %q.", sp.name, quoteAll(sp.enum), s))
	case kSize:
		val, d := attr.Expr.Value(nil)
		if d.HasErrors() {
			return nil, d
		}
		if val.Type() == cty.Number && val.IsKnown() && !val.IsNull() {
			f, _ := val.AsBigFloat().Float64()
			if f != math.Trunc(f) || f < float64(sp.min) || f > math.MaxInt64 {
				return nil, attrErr(attr, "Invalid size", fmt.Sprintf("%s must be a whole number of bytes of at least %d.", sp.name, sp.min))
			}
			return uint64(f), nil
		}
		var s string
		if d := gohcl.DecodeExpression(attr.Expr, nil, &s); d.HasErrors() {
			return nil, d
		}
		n, err := ParseSize(s)
		if err != nil {
			return nil, attrErr(attr, "Invalid size", err.Error()+".")
		}
		if n < sp.min {
			return nil, attrErr(attr, "Invalid size", fmt.Sprintf("%s must be at least %d bytes.", sp.name, sp.min))
		}
		return n, nil
	case kDuration:
		var s string
		if d := gohcl.DecodeExpression(attr.Expr, nil, &s); d.HasErrors() {
			return nil, d
		}
		dur, err := duration.Parse(s)
		if err != nil {
			return nil, attrErr(attr, "Invalid duration", err.Error()+".")
		}
		return dur, nil
	case kGroups:
		return decodeGroups(attr)
	case kWindows:
		var specs []string
		if d := gohcl.DecodeExpression(attr.Expr, nil, &specs); d.HasErrors() {
			return nil, d
		}
		out := make([]Window, 0, len(specs))
		for _, s := range specs {
			w, err := ParseWindow(s)
			if err != nil {
				return nil, attrErr(attr, "Invalid window", err.Error()+".")
			}
			out = append(out, w)
		}
		return out, nil
	}
	return nil, attrErr(attr, "Internal error", "unknown setting kind")
}

// decodeGroups decodes column_groups: non-empty groups of non-empty column
// names, each column in one group at most.
func decodeGroups(attr *hcl.Attribute) (any, hcl.Diagnostics) {
	var groups [][]string
	if d := gohcl.DecodeExpression(attr.Expr, nil, &groups); d.HasErrors() {
		return nil, d
	}
	seen := map[string]bool{}
	for _, g := range groups {
		if len(g) == 0 {
			return nil, attrErr(attr, "Empty column group", "Every column group must name at least one column.")
		}
		for _, c := range g {
			if c == "" {
				return nil, attrErr(attr, "Invalid column name", "A column group names an empty column.")
			}
			if seen[c] {
				return nil, attrErr(attr, "Column named twice", fmt.Sprintf("Column %q appears in more than one place in column_groups; each column belongs to one group.", c))
			}
			seen[c] = true
		}
	}
	if groups == nil {
		groups = [][]string{}
	}
	return groups, nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// checkRanges checks min <= max pairs set in the same block.
func (b *Block) checkRanges() hcl.Diagnostics {
	var diags hcl.Diagnostics
	pair := func(lo, hi string, less func(a, b any) bool) {
		l, okL := b.values[lo]
		h, okH := b.values[hi]
		if okL && okH && less(h.v, l.v) {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Minimum above maximum",
				Detail:   fmt.Sprintf("%s (%v) is above %s (%v, set at %s).", lo, show(l.v), hi, show(h.v), h.rng),
				Subject:  l.rng.Ptr(),
			})
		}
	}
	durLess := func(a, b any) bool { return a.(time.Duration) < b.(time.Duration) }
	u64Less := func(a, b any) bool { return a.(uint64) < b.(uint64) }
	pair("schedule.debounce", "schedule.max_delay", durLess)
	pair("schedule.min_interval", "schedule.max_delay", durLess)
	pair("compaction.max_rows_per_group", "compaction.max_rows_per_file", u64Less)
	pair("compaction.max_rows_per_file", "compaction.target_rows_per_fragment", u64Less)
	return diags
}

func show(v any) any {
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return v
}
