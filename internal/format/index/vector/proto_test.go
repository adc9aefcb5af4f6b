package vector_test

import (
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func protoClone(m *tablepb.IndexMetadata) *tablepb.IndexMetadata {
	return proto.Clone(m).(*tablepb.IndexMetadata)
}

func protoCloneManifest(m *tablepb.Manifest) *tablepb.Manifest {
	return proto.Clone(m).(*tablepb.Manifest)
}

func marshal(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
