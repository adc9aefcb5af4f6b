package lancefile

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

func (f *File) newFieldReader20(tree *fieldTree, top *filepb.Field, af arrow.Field) (fieldReader, error) {
	return nil, fmt.Errorf("%w: %s: format 2.0 reader not implemented yet", ErrUnsupportedEncoding, f.name)
}
