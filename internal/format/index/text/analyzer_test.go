package text

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// ParamsFromDetails reads every InvertedIndexDetails field, defaults an
// absent base tokenizer to "simple" (old entries), and refuses a field
// lance 8.0.0 does not write, a missing language and bytes that are no
// protobuf message.
func TestParamsFromDetails(t *testing.T) {
	maxLen := uint32(40)
	full, err := proto.Marshal(&tablepb.InvertedIndexDetails{
		BaseTokenizer: proto.String("ngram"), Language: `"French"`, WithPosition: true, MaxTokenLength: &maxLen,
		LowerCase: true, Stem: true, RemoveStopWords: true, AsciiFolding: true, MinNgramLength: 2, MaxNgramLength: 4, PrefixOnly: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParamsFromDetails(full)
	if err != nil {
		t.Fatal(err)
	}
	if p.BaseTokenizer != "ngram" || p.Language != "French" || !p.WithPosition || p.MaxTokenLength == nil || *p.MaxTokenLength != 40 ||
		!p.LowerCase || !p.Stem || !p.RemoveStopWords || !p.ASCIIFolding || p.MinNgramLength != 2 || p.MaxNgramLength != 4 || !p.PrefixOnly {
		t.Fatalf("params %+v", p)
	}
	bare, _ := proto.Marshal(&tablepb.InvertedIndexDetails{Language: `"English"`})
	if p, err := ParamsFromDetails(bare); err != nil || p.BaseTokenizer != "simple" || p.MaxTokenLength != nil || p.LowerCase {
		t.Fatalf("bare details: %+v %v", p, err)
	}
	newer := protowire.AppendVarint(protowire.AppendTag(bare, 12, protowire.VarintType), 1)
	if _, err := ParamsFromDetails(newer); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown field 12: %v, want ErrUnsupported", err)
	}
	if _, err := ParamsFromDetails(nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("no language: %v, want ErrUnsupported", err)
	}
	if _, err := ParamsFromDetails([]byte{0x12, 0x05, 'x'}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated details: %v, want ErrCorrupt", err)
	}
	badLang, _ := proto.Marshal(&tablepb.InvertedIndexDetails{Language: "English"})
	if _, err := ParamsFromDetails(badLang); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("language not a JSON string: %v, want ErrCorrupt", err)
	}
}
