package format

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// VersionsDir is the directory (relative to the table root) holding manifests.
const VersionsDir = "_versions"

// VersionHintKey is the key of the best-effort latest-version hint that
// lance 8.x writes after every commit on local file systems.
const VersionHintKey = "_versions/latest_version_hint.json"

const manifestSuffix = ".manifest"

// Naming is a manifest naming scheme.
type Naming int

const (
	// NamingV1 names version v "{v}.manifest" (decimal, unpadded).
	NamingV1 Naming = iota + 1
	// NamingV2 names version v "{MaxUint64-v:020}.manifest", so a
	// lexicographic listing returns the newest version first. LanceDB's
	// default.
	NamingV2
)

func (n Naming) String() string {
	switch n {
	case NamingV1:
		return "V1"
	case NamingV2:
		return "V2"
	default:
		return fmt.Sprintf("Naming(%d)", int(n))
	}
}

// ManifestName returns the base name of version v's manifest under n.
func ManifestName(n Naming, v uint64) string {
	if n == NamingV2 {
		return fmt.Sprintf("%020d%s", math.MaxUint64-v, manifestSuffix)
	}
	return strconv.FormatUint(v, 10) + manifestSuffix
}

// ManifestKey returns the key of version v's manifest relative to the table
// root, "_versions/<name>".
func ManifestKey(n Naming, v uint64) string {
	return VersionsDir + "/" + ManifestName(n, v)
}

// ParseManifestName parses a manifest base name or key (anything up to the
// last '/' is ignored). It returns ErrNotManifest (wrapped, with the reason)
// for detached versions ("d{v}.manifest"), staging and temporary files
// ("{name}-{uuid}", ".tmp*", "{v}.manifest-{uuid}") and anything else that is
// not a committed version, following Lance's detect_scheme/parse_version:
// a 29-character name is V2, any other "*.manifest" is V1.
func ParseManifestName(name string) (uint64, Naming, error) {
	base := name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		base = name[i+1:]
	}
	stem, ok := strings.CutSuffix(base, manifestSuffix)
	if !ok {
		return 0, 0, fmt.Errorf("format: %q: %w", base, ErrNotManifest)
	}
	if strings.HasPrefix(stem, "d") {
		return 0, 0, fmt.Errorf("format: %q is a detached version: %w", base, ErrNotManifest)
	}
	if stem == "" || len(stem) > 20 {
		return 0, 0, fmt.Errorf("format: %q: %w", base, ErrNotManifest)
	}
	for i := 0; i < len(stem); i++ {
		if stem[i] < '0' || stem[i] > '9' {
			return 0, 0, fmt.Errorf("format: %q: %w", base, ErrNotManifest)
		}
	}
	n, err := strconv.ParseUint(stem, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("format: %q: version out of range: %w", base, ErrNotManifest)
	}
	if len(base) == 20+len(manifestSuffix) {
		return math.MaxUint64 - n, NamingV2, nil
	}
	return n, NamingV1, nil
}

// DetectNaming returns the naming scheme of a _versions/ listing (base names
// or keys). Names that are not manifests are ignored. A listing with no
// manifest returns (0, nil); one that mixes schemes returns ErrMixedNaming.
func DetectNaming(names []string) (Naming, error) {
	var found Naming
	for _, name := range names {
		_, n, err := ParseManifestName(name)
		if err != nil {
			continue
		}
		if found != 0 && n != found {
			return 0, fmt.Errorf("format: _versions holds both %s and %s manifest names: %w", found, n, ErrMixedNaming)
		}
		found = n
	}
	return found, nil
}

// VersionRef names one version of one table.
type VersionRef struct {
	// Table is the table root URI.
	Table string
	// Version is the manifest version.
	Version uint64
}

func (r VersionRef) String() string { return fmt.Sprintf("%s@%d", r.Table, r.Version) }
