package text

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// analyzerDocs are documents that exercise the tokenizer: every suffix
// rule of the English stemmer on many roots, stop words (before and after
// stemming), case, punctuation, digits, long tokens, and accented and
// non-Latin letters.
func analyzerDocs() []string {
	roots := strings.Fields("connect relate generate nation condition agree feed happy hope hop run sing care fly die lie " +
		"organ civil sensible triplicate formal hopeful good effective fluent possible rational adjust defens " +
		"depend adopt replac activ irritant bow box tann tap fil fail pil plaster cry say gener commun arsen " +
		"univers past news skies dying lying tying idly gently ugly early only singly inning outing canning herring " +
		"earring proceed exceed succeed andes atlas cosmos bias lance index table compaction storage vector")
	suffixes := []string{"", "s", "es", "ies", "ied", "ing", "ingly", "ed", "edly", "ly", "ness", "ful", "fulness",
		"ational", "tional", "ation", "ator", "alism", "aliti", "alli", "ence", "enci", "ance", "anci", "izer", "ization",
		"ousli", "ousness", "iveness", "iviti", "biliti", "bli", "logi", "fulli", "lessli", "ical", "icate", "iciti",
		"ative", "alize", "ement", "ment", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ion", "al", "er", "ic", "able", "ible",
		"eed", "eedly", "'s", "s'", "'"}
	var words []string
	for _, r := range roots {
		for _, s := range suffixes {
			words = append(words, r+s)
		}
	}
	words = append(words, strings.Fields("a an and are as at be but by for if in into is it no not of on or such that the "+
		"their then there these they this to was will with i me my he she we you his her its our been being have has had "+
		"do does did having Hello HELLO MiXeD ThE And THIS 42 3d x1 0x1F 2024 café Café naïve façade über straße "+
		"Ærøskøbing łódź ŁÓDŹ Œuvre œuvre ĳssel ſtraße Ĳssel Ğüneş şeker İstanbul ıstanbul ĸra ŉ ὀδυσσεύς москва Москва 東京 ソニー 한국어 "+
		"supercalifragilisticexpialidociousnessnessness antidisestablishmentarianism "+
		"abcdefghijabcdefghijabcdefghijabcdefghi abcdefghijabcdefghijabcdefghijabcdefghij abcdefghijabcdefghijabcdefghijabcdefghijk")...)
	var docs []string
	seps := []string{" ", ", ", ". ", "-", "_", "'", " (", ") ", "/", "  ", "\t", "\n", "!? "}
	for i := 0; i < len(words); i += 7 {
		var b strings.Builder
		for k, w := range words[i:min(i+7, len(words))] {
			if k > 0 {
				b.WriteString(seps[(i+k)%len(seps)])
			}
			b.WriteString(w)
		}
		// repeat a word so frequencies and positions above one show up
		b.WriteString(" " + words[i])
		docs = append(docs, b.String())
	}
	return docs
}

// decodePositions decodes one document's position binaries (the inverse
// of encodePositions).
func decodePositions(t *testing.T, bins [][]byte) []uint32 {
	t.Helper()
	if len(bins) == 0 || len(bins[0]) != 4 {
		t.Fatalf("position list %v", bins)
	}
	n := int(binary.LittleEndian.Uint32(bins[0]))
	var out []uint32
	scratch := make([]uint32, blockSize)
	for _, b := range bins[1:] {
		if len(out)+blockSize <= n {
			if _, err := readSorted(scratch, b); err != nil {
				t.Fatal(err)
			}
			out = append(out, scratch...)
			continue
		}
		for k := 0; k+4 <= len(b); k += 4 {
			out = append(out, binary.LittleEndian.Uint32(b[k:]))
		}
	}
	if len(out) != n {
		t.Fatalf("%d positions, count says %d", len(out), n)
	}
	return out
}

// docTokens is what an index holds for one document: per token, its
// positions (or its frequency as that many zeros without positions).
type docTokens map[string][]uint32

// indexedTokens reads every document's tokens out of partition p in dir.
func indexedTokens(t *testing.T, part *partition, withPosition bool) map[uint64]docTokens {
	t.Helper()
	byID := map[uint64]string{}
	for k, v := range part.tokens {
		byID[v] = k
	}
	out := map[uint64]docTokens{}
	for _, row := range part.docs {
		out[row] = docTokens{}
	}
	for id, r := range part.rows {
		tok := byID[uint64(id)]
		for k, d := range r.docs {
			row := part.docs[d]
			if withPosition {
				out[row][tok] = decodePositions(t, r.positions[k])
			} else {
				out[row][tok] = make([]uint32, r.freqs[k])
			}
		}
	}
	return out
}

// analyze tokenizes doc with a.
func analyze(t *testing.T, a *Analyzer, doc string, withPosition bool) (docTokens, uint32) {
	t.Helper()
	out := docTokens{}
	n := uint32(0)
	err := a.Tokens(doc, func(tok string, pos uint32) error {
		n++
		if !withPosition {
			pos = 0
		}
		out[tok] = append(out[tok], pos)
		return nil
	})
	if err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	return out, n
}

// TestAnalyzerOracle: real Lance indexes documents that exercise every
// filter of its tokenizer (simple tokenizer, max_token_length, lower case,
// English Snowball stemming, English stop words, ASCII folding) with the
// default params and with some switched off; for every document the
// tokens, frequencies, positions and token count in Lance's index equal
// what our analyzer yields for the index's own params.
func TestAnalyzerOracle(t *testing.T) {
	oracle.Require(t)
	docs := analyzerDocs()
	if f := os.Getenv("LANCED_FTS_WORDS"); f != "" {
		// A larger word list, one word per document (e.g. Snowball's
		// English vocabulary): LANCED_FTS_WORDS=/path/to/words.txt.
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, strings.Fields(string(b))...)
	} else {
		// The first 4,988 words of the stemmer module's own English test
		// vocabulary: stemming checked against Lance on real words, and
		// Lance writes this index's posting files with RLE chunks whose
		// runs end past the chunk's value count.
		docs = append(docs, snowballVocabulary(t, 4988)...)
	}
	for _, c := range []struct {
		name string
		opts map[string]any
	}{
		{"default", map[string]any{}},
		{"positions", map[string]any{"withPosition": true}},
		{"no-stem-keep-case", map[string]any{"stem": false, "lowercase": false, "removeStopWords": false, "asciiFolding": false, "maxTokenLength": 12, "withPosition": true}},
		{"stop-no-fold", map[string]any{"stem": false, "asciiFolding": false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := oracle.Build(t, "sized-1x1-v0-t2-d0", dir)
			oracle.RunOps(t, path, []oracle.Op{
				{"op": "delete", "where": "true"},
				{"op": "add", "texts": map[string]any{"body": docs}},
				{"op": "create_index", "column": "body", "type": "fts", "options": c.opts},
			})
			rep := oracle.Inspect(t, path, 0)
			m := indextest.ReadManifest(t, path, rep.Version)
			segDir := filepath.Join(path, "_indices", indextest.UUID(t, indextest.Index(t, m, "body_idx").GetUuid()))
			md, err := ReadMetadata(context.Background(), lancefiletest.Open(t, filepath.Join(segDir, MetadataFileName)))
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParseParams(md.Params)
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewAnalyzer(p)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uint64]docTokens{}
			counts := map[uint64]uint32{}
			for _, pid := range md.Partitions {
				part := readPartition(t, segDir, pid)
				maps.Copy(got, indexedTokens(t, part, p.WithPosition))
				for i, row := range part.docs {
					counts[row] = part.numTokens[i]
				}
			}
			if len(got) != len(docs) {
				t.Fatalf("Lance indexed %d docs of %d", len(got), len(docs))
			}
			bad := 0
			tokens := map[string]bool{}
			for row, lance := range got {
				doc := docs[uint32(row)]
				ours, n := analyze(t, a, doc, p.WithPosition)
				for k := range lance {
					tokens[k] = true
				}
				if n != counts[row] || !maps.EqualFunc(ours, lance, slices.Equal[[]uint32]) {
					bad++
					if bad <= 10 {
						t.Errorf("%q: Lance %d tokens %v, ours %d %v", doc, counts[row], fmtTokens(lance), n, fmtTokens(ours))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d documents tokenized differently (params %s)", bad, len(docs), md.Params)
			}
			t.Logf("params %s: %d documents, %d distinct tokens, all equal to Lance's", md.Params, len(docs), len(tokens))
		})
	}
}

func fmtTokens(d docTokens) string {
	keys := slices.Sorted(maps.Keys(d))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s%v ", k, d[k])
	}
	return b.String()
}

// snowballVocabulary returns up to n input words of the English vocabulary
// test of github.com/kljensen/snowball, read from the module cache.
func snowballVocabulary(t *testing.T, n int) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kljensen/snowball").Output()
	if err != nil {
		t.Fatalf("locate the snowball module: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "english_vocab", "vocab_test.go"))
	if err != nil {
		t.Fatalf("read the snowball vocabulary: %v", err)
	}
	var words []string
	for _, m := range regexp.MustCompile(`\{"([^"]*)", "`).FindAllSubmatch(b, n) {
		words = append(words, string(m[1]))
	}
	if len(words) < n {
		t.Fatalf("snowball vocabulary: %d words, want %d", len(words), n)
	}
	return words
}
