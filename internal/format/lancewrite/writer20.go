package lancewrite

import (
	"errors"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
)

type writer20 struct{}

func newWriter20(c *container, roots []*node, pageBytes int) *writer20 { return &writer20{} }
func (w *writer20) add(rec arrow.Record) error                         { return errors.New("2.0 not yet") }
func (w *writer20) finish() ([]*file2pb.ColumnMetadata, error)         { return nil, errors.New("2.0 not yet") }
