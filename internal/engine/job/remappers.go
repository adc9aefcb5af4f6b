package job

// Every index sub-package registers its index.Remapper from init; importing
// them here gives the planner and the engine the same registry.
import (
	_ "github.com/lanced-dev/lanced/internal/format/index/fm"
	_ "github.com/lanced-dev/lanced/internal/format/index/scalar"
	_ "github.com/lanced-dev/lanced/internal/format/index/text"
	_ "github.com/lanced-dev/lanced/internal/format/index/vector"
)
