package text

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Params is the tokenizer configuration of an inverted index, the "params"
// JSON of its metadata.lance (lance 8.0.0's InvertedIndexParams,
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/inverted/tokenizer.rs).
type Params struct {
	LanceTokenizer  *string  `json:"lance_tokenizer"`
	BaseTokenizer   string   `json:"base_tokenizer"`
	Language        string   `json:"language"`
	WithPosition    bool     `json:"with_position"`
	MaxTokenLength  *int     `json:"max_token_length"`
	LowerCase       bool     `json:"lower_case"`
	Stem            bool     `json:"stem"`
	RemoveStopWords bool     `json:"remove_stop_words"`
	CustomStopWords []string `json:"custom_stop_words"`
	ASCIIFolding    bool     `json:"ascii_folding"`
	MinNgramLength  uint32   `json:"min_ngram_length"`
	MaxNgramLength  uint32   `json:"max_ngram_length"`
	PrefixOnly      bool     `json:"prefix_only"`
}

// ParseParams decodes the params JSON with serde's defaults for missing
// fields. A field lance 8.0.0 does not write is ErrUnsupported: a newer
// tokenizer setting lanced would not apply.
func ParseParams(raw []byte) (*Params, error) {
	p := &Params{LowerCase: true, Stem: true, RemoveStopWords: true, ASCIIFolding: true, MinNgramLength: 3, MaxNgramLength: 3}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%w: tokenizer params %s: %v", ErrUnsupported, raw, err)
	}
	if p.Language == "" {
		return nil, fmt.Errorf("%w: InvertedIndexDetails without a language", ErrUnsupported)
	}
	return p, nil
}

// Analyzer tokenizes documents as lance 8.0.0 does for an index's params:
// a tantivy TextAnalyzer of the base tokenizer, then RemoveLongFilter
// (max_token_length), LowerCaser, Stemmer, StopWordFilter and
// AsciiFoldingFilter, in that order (InvertedIndexParams::build).
type Analyzer struct {
	p     Params
	stop  map[string]bool
	buf   []byte
	runes []rune
}

// NewAnalyzer returns the analyzer of p, or ErrUnsupported (with the
// reason) for settings lanced cannot reproduce exactly.
func NewAnalyzer(p *Params) (*Analyzer, error) {
	if err := p.Supported(); err != nil {
		return nil, err
	}
	a := &Analyzer{p: *p}
	if p.RemoveStopWords {
		a.stop = map[string]bool{}
		words := englishStopWords
		if p.CustomStopWords != nil {
			words = p.CustomStopWords
		}
		for _, w := range words {
			a.stop[w] = true
		}
	}
	return a, nil
}

// Supported reports whether lanced tokenizes exactly as Lance does with
// these params; the error (ErrUnsupported) says what it lacks.
func (p *Params) Supported() error {
	unsup := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
	}
	if p.LanceTokenizer != nil && *p.LanceTokenizer != "text" {
		return unsup("lance_tokenizer %q (lanced tokenizes plain text only)", *p.LanceTokenizer)
	}
	if p.BaseTokenizer != "simple" {
		return unsup("base_tokenizer %q (lanced reproduces tantivy's simple tokenizer only)", p.BaseTokenizer)
	}
	english := p.Language == "English"
	if p.Stem && !english {
		return unsup("stemming for language %s (lanced has the English Snowball stemmer only)", p.Language)
	}
	if p.Stem && !p.LowerCase {
		return unsup("stemming without lower_case (lanced's stemmer lowercases)")
	}
	if p.RemoveStopWords && p.CustomStopWords == nil && !english {
		return unsup("stop words of language %s (lanced has the English list only)", p.Language)
	}
	if p.MaxTokenLength != nil && *p.MaxTokenLength < 0 {
		return unsup("max_token_length %d", *p.MaxTokenLength)
	}
	return nil
}

// englishStopWords is tantivy's English stop word list (Lucene's
// EnglishAnalyzer set), used by StopWordFilter::new(Language::English).
var englishStopWords = strings.Fields("a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with")

// isAlnum is Rust's char::is_alphanumeric: Unicode Alphabetic (letters,
// letter numbers, Other_Alphabetic) or Numeric (Nd, Nl, No).
func isAlnum(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}

// Tokens calls fn for every token of doc that survives the filters, with
// its position (the base tokenizer's token count before it: filtered
// tokens leave gaps, as in tantivy). An error from fn stops it; a token
// lanced cannot fold exactly is ErrUnsupported.
func (a *Analyzer) Tokens(doc string, fn func(token string, pos uint32) error) error {
	pos := uint32(0)
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRuneInString(doc[i:])
		if !isAlnum(r) {
			i += n
			continue
		}
		j := i + n
		for j < len(doc) {
			r, n := utf8.DecodeRuneInString(doc[j:])
			if !isAlnum(r) {
				break
			}
			j += n
		}
		tok, p := doc[i:j], pos
		i, pos = j, pos+1
		if ml := a.p.MaxTokenLength; ml != nil && len(tok) >= *ml {
			continue
		}
		t, ok, err := a.filter(tok)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := fn(t, p); err != nil {
			return err
		}
	}
	return nil
}

// filter applies the token filters after the length filter; ok is false
// for a stop word.
func (a *Analyzer) filter(tok string) (string, bool, error) {
	if a.p.LowerCase {
		tok = lowerCase(tok)
	}
	if a.p.Stem && utf8.RuneCountInString(tok) >= 3 {
		// Snowball's English stemmer leaves words of fewer than three
		// characters alone.
		tok = english.Stem(tok, true)
	}
	if a.stop[tok] {
		return "", false, nil
	}
	if a.p.ASCIIFolding {
		var err error
		if tok, err = foldASCII(tok); err != nil {
			return "", false, err
		}
	}
	return tok, true, nil
}

// lowerCase is tantivy's LowerCaser: ASCII in place, otherwise every char
// through char::to_lowercase (per char, so no final-sigma rule).
func lowerCase(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	var b strings.Builder
	for _, r := range s {
		if r == 'İ' { // the one unconditional multi-char lowercase mapping
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// ParamsFromDetails reads the tokenizer params an index entry's
// InvertedIndexDetails (lance's index_old.proto) records: everything but
// custom_stop_words and lance_tokenizer, which only metadata.lance holds.
// A field lance 8.0.0 does not write is ErrUnsupported.
func ParamsFromDetails(value []byte) (*Params, error) {
	var d tablepb.InvertedIndexDetails
	if err := proto.Unmarshal(value, &d); err != nil {
		return nil, fmt.Errorf("%w: InvertedIndexDetails: %v", ErrCorrupt, err)
	}
	if unk := d.ProtoReflect().GetUnknown(); len(unk) > 0 {
		num, _, _ := protowire.ConsumeTag(unk)
		return nil, fmt.Errorf("%w: InvertedIndexDetails field %d (newer than lance 8.0.0)", ErrUnsupported, num)
	}
	p := &Params{
		BaseTokenizer:   "simple",
		WithPosition:    d.GetWithPosition(),
		LowerCase:       d.GetLowerCase(),
		Stem:            d.GetStem(),
		RemoveStopWords: d.GetRemoveStopWords(),
		ASCIIFolding:    d.GetAsciiFolding(),
		MinNgramLength:  d.GetMinNgramLength(),
		MaxNgramLength:  d.GetMaxNgramLength(),
		PrefixOnly:      d.GetPrefixOnly(),
	}
	if d.BaseTokenizer != nil {
		p.BaseTokenizer = d.GetBaseTokenizer()
	}
	if d.MaxTokenLength != nil {
		l := int(d.GetMaxTokenLength())
		p.MaxTokenLength = &l
	}
	if d.GetLanguage() != "" {
		// Lance stores the language as its serde JSON string.
		if err := json.Unmarshal([]byte(d.GetLanguage()), &p.Language); err != nil {
			return nil, fmt.Errorf("%w: InvertedIndexDetails language %q: %v", ErrCorrupt, d.GetLanguage(), err)
		}
	}
	if p.Language == "" {
		return nil, fmt.Errorf("%w: InvertedIndexDetails without a language", ErrUnsupported)
	}
	return p, nil
}
