package vector

import "github.com/lanced-dev/lanced/internal/format/index"

// The row-address mapping is shared by every index type; see
// internal/format/index.
type (
	Mapping           = index.Mapping
	RewriteGroup      = index.RewriteGroup
	OldFragment       = index.OldFragment
	NewFragment       = index.NewFragment
	CompactionMapping = index.CompactionMapping
)

// NewCompactionMapping is index.NewCompactionMapping.
func NewCompactionMapping(groups []RewriteGroup) (*CompactionMapping, error) {
	return index.NewCompactionMapping(groups)
}
