package watch

import (
	"github.com/lanced-dev/lanced/internal/format"
)

func ref(table string, v uint64) format.VersionRef {
	return format.VersionRef{Table: table, Version: v}
}
