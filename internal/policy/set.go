package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/hashicorp/hcl/v2"
)

// Set is an immutable, validated collection of policy files: at most one
// defaults block and any number of table blocks with distinct globs.
type Set struct {
	Files    []*File
	Defaults *Block
	// Tables are every table block, most specific glob first.
	Tables []*Block
	// Sources maps file names to their bytes, for diagnostic snippets.
	Sources map[string][]byte
	// Events, if set, are the daemon config's scheduling defaults (its
	// events block): a table's debounce and max_delay when no policy layer
	// sets them.
	Events *EventDefaults
}

// EventDefaults are the daemon config's debounce and max_delay; Where
// names the config file.
type EventDefaults struct {
	Debounce, MaxDelay time.Duration
	Where              string
}

// WithEvents returns a copy of s whose tables default to ev's debounce
// and max_delay (s may be nil: no policies).
func (s *Set) WithEvents(ev EventDefaults) *Set {
	var c Set
	if s != nil {
		c = *s
	}
	c.Events = &ev
	return &c
}

// HCLFiles returns the parsed files by name, as hcl.NewDiagnosticTextWriter
// wants them.
func (s *Set) HCLFiles() map[string]*hcl.File {
	out := map[string]*hcl.File{}
	for _, f := range s.Files {
		if f.HCL != nil {
			out[f.Name] = f.HCL
		}
	}
	return out
}

// LoadDir parses every *.hcl file at the top of fsys (sorted by name) into a
// Set. With errors in the diagnostics the Set is still returned, for
// rendering, but must not be used.
func LoadDir(fsys fs.FS) (*Set, hcl.Diagnostics) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return &Set{Sources: map[string][]byte{}}, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read policy directory",
			Detail:   err.Error() + ": check the path (a directory of *.hcl policy files)",
		}}
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") || strings.HasPrefix(path.Base(e.Name()), ".") {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	srcs := map[string][]byte{}
	var diags hcl.Diagnostics
	var files []*File
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot read policy file", Detail: fmt.Sprintf("%s: %v", n, err)})
			continue
		}
		srcs[n] = b
		f, d := Parse(b, n)
		diags = append(diags, d...)
		files = append(files, f)
	}
	s, d := NewSet(files)
	s.Sources = srcs
	return s, append(diags, d...)
}

// LoadDirNamed is LoadDir with file names prefixed by dir, so diagnostics
// name the real path.
func LoadDirNamed(fsys fs.FS, dir string) (*Set, hcl.Diagnostics) {
	s, diags := LoadDir(prefixFS{fsys, dir})
	return s, diags
}

// prefixFS makes ReadDir(".") return names prefixed with dir, and ReadFile
// strip the prefix, so parsed file names carry the directory.
type prefixFS struct {
	fs.FS
	dir string
}

func (p prefixFS) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(p.FS, name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == "." {
			pe.Path = p.dir // name the directory, not "."
		}
		return nil, err
	}
	out := make([]fs.DirEntry, len(es))
	for i, e := range es {
		out[i] = prefixedEntry{e, path.Join(p.dir, e.Name())}
	}
	return out, nil
}

func (p prefixFS) ReadFile(name string) ([]byte, error) {
	// Only top-level entries are listed, so the base name is the file.
	return fs.ReadFile(p.FS, path.Base(name))
}

type prefixedEntry struct {
	fs.DirEntry
	name string
}

func (e prefixedEntry) Name() string { return e.name }

// NewSet combines parsed files, checking that defaults appear once and
// table globs are distinct across files.
func NewSet(files []*File) (*Set, hcl.Diagnostics) {
	s := &Set{Files: files, Sources: map[string][]byte{}}
	var diags hcl.Diagnostics
	byGlob := map[string]*Block{}
	for _, f := range files {
		if f.Defaults != nil {
			if s.Defaults != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate defaults block",
					Detail:   fmt.Sprintf("A defaults block was already defined at %s; a policy directory has one.", s.Defaults.DeclRange),
					Subject:  f.Defaults.DeclRange.Ptr(),
				})
			} else {
				s.Defaults = f.Defaults
			}
		}
		for _, t := range f.Tables {
			if prev, dup := byGlob[t.Glob]; dup {
				if prev.DeclRange.Filename != t.DeclRange.Filename {
					diags = append(diags, &hcl.Diagnostic{
						Severity: hcl.DiagError,
						Summary:  "Duplicate table block",
						Detail:   fmt.Sprintf("A table block for %q was already defined at %s.", t.Glob, prev.DeclRange),
						Subject:  t.DeclRange.Ptr(),
					})
				}
				continue
			}
			byGlob[t.Glob] = t
			s.Tables = append(s.Tables, t)
		}
	}
	sort.SliceStable(s.Tables, func(i, j int) bool { return moreSpecific(s.Tables[i].Glob, s.Tables[j].Glob) })
	return s, diags
}

// specificity ranks a glob: more literal characters first, then fewer
// wildcards.
func specificity(glob string) (literal, wild int) {
	esc := false
	depth := 0
	for _, r := range glob {
		switch {
		case esc:
			literal++
			esc = false
		case r == '\\':
			esc = true
		case r == '[' || r == '{':
			depth++
			wild++
		case r == ']' || r == '}':
			if depth > 0 {
				depth--
			}
		case r == '*' || r == '?':
			wild++
		case depth == 0:
			literal++
		}
	}
	return literal, wild
}

func moreSpecific(a, b string) bool {
	la, wa := specificity(a)
	lb, wb := specificity(b)
	if la != lb {
		return la > lb
	}
	if wa != wb {
		return wa < wb
	}
	return a < b
}

// Matching returns the table blocks whose glob matches uri, most specific
// first.
func (s *Set) Matching(uri string) []*Block {
	var out []*Block
	for _, t := range s.Tables {
		if ok, err := doublestar.Match(t.Glob, uri); err == nil && ok {
			out = append(out, t)
		}
	}
	return out
}

func blockSource(b *Block, rng hcl.Range) Source {
	where := fmt.Sprintf("%s:%d", rng.Filename, rng.Start.Line)
	if b.IsDefaults {
		return Source{Kind: FromDefaults, Where: where}
	}
	return Source{Kind: FromPolicy, Where: where, Block: b.Glob}
}

// Resolve computes the effective policy of the table at uri whose manifest
// config is tableConfig. Per setting: the most specific matching table
// block that sets it, else the table config key, else defaults, else
// Lance's default. Resolve is pure; a nil Set resolves to Lance's defaults
// and table config.
func (s *Set) Resolve(uri string, tableConfig map[string]string) Effective {
	e := LanceDefaults(uri)
	var matched []*Block
	var defaults *Block
	if s != nil && s.Events != nil {
		src := Source{Kind: FromDaemonConfig, Where: s.Events.Where}
		e.Schedule.Debounce = Setting[Duration]{Value: Duration(s.Events.Debounce), Source: src}
		e.Schedule.MaxDelay = Setting[Duration]{Value: Duration(s.Events.MaxDelay), Source: src}
	}
	if s != nil {
		matched = s.Matching(uri)
		defaults = s.Defaults
	}
	for _, m := range matched {
		e.Matched = append(e.Matched, m.Glob)
	}
	for _, sp := range specs {
		if v, src, ok := pick(sp, matched, defaults, tableConfig, &e.Warnings); ok {
			sp.set(&e, v, src)
		}
	}
	if e.Schedule.Debounce.Value > e.Schedule.MaxDelay.Value {
		e.Warnings = append(e.Warnings, fmt.Sprintf("schedule.debounce %s (%s) is above schedule.max_delay %s (%s); max_delay wins",
			time.Duration(e.Schedule.Debounce.Value), e.Schedule.Debounce.Source, time.Duration(e.Schedule.MaxDelay.Value), e.Schedule.MaxDelay.Source))
	}
	return e
}

func pick(sp *spec, matched []*Block, defaults *Block, cfg map[string]string, warnings *[]string) (any, Source, bool) {
	p := sp.path()
	for _, b := range matched {
		if v, ok := b.values[p]; ok {
			return v.v, blockSource(b, v.rng), true
		}
	}
	if sp.configKey != "" {
		if raw, ok := cfg[sp.configKey]; ok {
			v, err := parseConfigValue(sp, raw)
			if err == nil {
				return v, Source{Kind: FromTableConfig, Where: sp.configKey}, true
			}
			*warnings = append(*warnings, "ignored table config: "+err.Error())
		}
	}
	if defaults != nil {
		if v, ok := defaults.values[p]; ok {
			return v.v, blockSource(defaults, v.rng), true
		}
	}
	return nil, Source{}, false
}

// SettingNames lists every setting path ("compaction.target_rows_per_fragment")
// in the order explain prints them.
func SettingNames() []string {
	out := make([]string, len(specs))
	for i, sp := range specs {
		out[i] = sp.path()
	}
	return out
}

// ConfigKey returns the manifest config key that can set the setting at
// path, or "".
func ConfigKey(path string) string {
	for _, sp := range specs {
		if sp.path() == path {
			return sp.configKey
		}
	}
	return ""
}

// display writes a setting's value the way a policy file does: sizes in
// the largest binary unit that divides them ("64GiB"), durations in days
// when whole ("7d"), otherwise Go's form without zero units ("10m").
func display(path string, v any) string {
	var k kind = -1
	for _, sp := range specs {
		if sp.path() == path {
			k = sp.kind
		}
	}
	switch x := v.(type) {
	case float64:
		if k == kSize && x > 0 && x == float64(uint64(x)) {
			return FormatSize(uint64(x))
		}
	case string:
		if k == kDuration {
			if d, err := time.ParseDuration(x); err == nil {
				return FormatDuration(d)
			}
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// FormatSize writes n bytes in the largest binary unit that divides it.
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for i < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatUint(n, 10)
	}
	return strconv.FormatUint(n, 10) + units[i]
}

// FormatDuration writes d in days when whole ("7d"),
// otherwise as Go does without trailing zero units ("10m", "1h30m").
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0s"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	for _, z := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, "m"+z) || strings.HasSuffix(s, "h"+z) {
			s = strings.TrimSuffix(s, z)
		}
	}
	return s
}
