package text

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// foldASCII is tantivy's AsciiFoldingFilter (Lucene's ASCIIFoldingFilter
// table) for the characters lanced knows: the letters of Latin-1
// Supplement and Latin Extended-A, and scripts the table does not touch
// (Greek, Cyrillic, CJK, ...), which stay as they are. Any other non-ASCII
// character is ErrUnsupported: lanced does not carry the whole table, and
// a guessed folding would index the row under the wrong token.
func foldASCII(s string) (string, error) {
	if isASCII(s) {
		return s, nil
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r >= 0xC0 && r <= 0x17F:
			f := latinFold[r-0xC0]
			if f == "" {
				return "", fmt.Errorf("%w: token %q: ASCII folding of U+%04X", ErrUnsupported, s, r)
			}
			b.WriteString(f)
		case unfolded(r):
			b.WriteRune(r)
		default:
			return "", fmt.Errorf("%w: token %q: lanced's ASCII folding table does not cover U+%04X", ErrUnsupported, s, r)
		}
	}
	return b.String(), nil
}

// unfoldedScripts are scripts of which Lucene's folding table maps no
// character.
var unfoldedScripts = []*unicode.RangeTable{
	unicode.Greek, unicode.Cyrillic, unicode.Armenian, unicode.Hebrew, unicode.Arabic,
	unicode.Devanagari, unicode.Bengali, unicode.Tamil, unicode.Thai, unicode.Georgian,
	unicode.Hangul, unicode.Hiragana, unicode.Katakana, unicode.Han,
}

func unfolded(r rune) bool {
	switch {
	case r >= 0x1D00 && r < 0x1E00 || r >= 0x2C60 && r < 0x2C80 || r >= 0xA720 && r < 0xA800 ||
		r >= 0xFB00 && r < 0xFB07 || r >= 0xFF00 && r < 0xFFF0:
		return false // phonetic and Latin extensions, ligatures, fullwidth forms: folded by Lucene's table
	case r >= 0x300 && r < 0x370:
		return true // combining diacritical marks: kept
	case r >= 0x3000:
		return true // CJK, kana, Hangul and beyond: the table maps none of them
	}
	return unicode.In(r, unfoldedScripts...)
}

// latinFold maps U+00C0..U+017F; "" where the table has no entry lanced
// is sure of (×, ÷).
var latinFold = func() [0x180 - 0xC0]string {
	var t [0x180 - 0xC0]string
	set := func(from, to rune, s string) {
		for r := from; r <= to; r++ {
			t[r-0xC0] = s
		}
	}
	// Latin-1 Supplement.
	set(0xC0, 0xC5, "A")
	set(0xC6, 0xC6, "AE")
	set(0xC7, 0xC7, "C")
	set(0xC8, 0xCB, "E")
	set(0xCC, 0xCF, "I")
	set(0xD0, 0xD0, "D")
	set(0xD1, 0xD1, "N")
	set(0xD2, 0xD6, "O")
	set(0xD8, 0xD8, "O")
	set(0xD9, 0xDC, "U")
	set(0xDD, 0xDD, "Y")
	set(0xDE, 0xDE, "TH")
	set(0xDF, 0xDF, "ss")
	set(0xE0, 0xE5, "a")
	set(0xE6, 0xE6, "ae")
	set(0xE7, 0xE7, "c")
	set(0xE8, 0xEB, "e")
	set(0xEC, 0xEF, "i")
	set(0xF0, 0xF0, "d")
	set(0xF1, 0xF1, "n")
	set(0xF2, 0xF6, "o")
	set(0xF8, 0xF8, "o")
	set(0xF9, 0xFC, "u")
	set(0xFD, 0xFD, "y")
	set(0xFE, 0xFE, "th")
	set(0xFF, 0xFF, "y")
	// Latin Extended-A: mostly capital/small pairs.
	pairs := func(from, to rune, upper, lower string) {
		for r := from; r <= to; r++ {
			if (r-from)%2 == 0 {
				t[r-0xC0] = upper
			} else {
				t[r-0xC0] = lower
			}
		}
	}
	pairs(0x100, 0x105, "A", "a")
	pairs(0x106, 0x10D, "C", "c")
	pairs(0x10E, 0x111, "D", "d")
	pairs(0x112, 0x11B, "E", "e")
	pairs(0x11C, 0x123, "G", "g")
	pairs(0x124, 0x127, "H", "h")
	pairs(0x128, 0x131, "I", "i")
	set(0x132, 0x132, "IJ")
	set(0x133, 0x133, "ij")
	pairs(0x134, 0x135, "J", "j")
	pairs(0x136, 0x137, "K", "k")
	set(0x138, 0x138, "k")        // tantivy: k (checked against lance 8.0.0)
	pairs(0x139, 0x142, "L", "l") // odd start: Ĺ=0x139
	pairs(0x143, 0x148, "N", "n")
	set(0x149, 0x149, "n") // tantivy: n (checked against lance 8.0.0)
	pairs(0x14A, 0x14B, "N", "n")
	pairs(0x14C, 0x151, "O", "o")
	set(0x152, 0x152, "OE")
	set(0x153, 0x153, "oe")
	pairs(0x154, 0x159, "R", "r")
	pairs(0x15A, 0x161, "S", "s")
	pairs(0x162, 0x167, "T", "t")
	pairs(0x168, 0x173, "U", "u")
	pairs(0x174, 0x175, "W", "w")
	pairs(0x176, 0x177, "Y", "y")
	set(0x178, 0x178, "Y")
	pairs(0x179, 0x17E, "Z", "z")
	set(0x17F, 0x17F, "s")
	return t
}()

// isASCII reports whether s holds only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
