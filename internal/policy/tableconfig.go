package policy

import (
	"fmt"
	"strings"

	"github.com/agext/levenshtein"
)

// lanceOnlySpecs are table config keys Lance itself reads that no lanced
// setting maps to (Lance's auto-cleanup hook, rust/lance/src/dataset/cleanup.rs
// in https://github.com/lancedb/lance). They are checked when set, never
// applied.
var lanceOnlySpecs = []*spec{
	{section: "cleanup", name: "interval", kind: kCount, min: 1, configKey: "lance.auto_cleanup.interval"},
	{section: "cleanup", name: "referenced_branch", kind: kText, configKey: "lance.auto_cleanup.referenced_branch"},
}

// configSpec returns the spec a table config key sets, or nil.
func configSpec(key string) *spec {
	for _, list := range [][]*spec{specs, lanceOnlySpecs} {
		for _, sp := range list {
			if sp.configKey != "" && sp.configKey == key {
				return sp
			}
		}
	}
	return nil
}

// knownConfigKeys lists every table config key lanced checks.
func knownConfigKeys() []string {
	var out []string
	for _, list := range [][]*spec{specs, lanceOnlySpecs} {
		for _, sp := range list {
			if sp.configKey != "" {
				out = append(out, sp.configKey)
			}
		}
	}
	return out
}

// describe says what a value of sp's kind looks like.
func (sp *spec) describe() string {
	switch sp.kind {
	case kCount:
		return fmt.Sprintf("a whole number >= %d", sp.min)
	case kSize:
		return "a size like 64GiB or a number of bytes"
	case kBool:
		return "true or false"
	case kFraction:
		return "a number in (0, 1]"
	case kRate:
		return "a number above 0"
	case kDuration:
		return `a duration like "168h" or "7d"`
	case kGroups:
		return `column groups like "emb;cap,tags" (';' between groups, ',' between columns, each column once)`
	}
	return "a string"
}

// CheckTableConfig checks one key=value a user is about to set in a table's
// config. A key lanced reads (lance.compaction.*, lance.auto_cleanup.*, ...)
// must hold a value of its type; an unknown key in those namespaces (or in
// a namespace a few letters away from one), or a lance.* key a few letters
// away from a known one, is refused with the
// closest known key. Any other key is not lanced's and passes.
func CheckTableConfig(key, value string) error {
	if sp := configSpec(key); sp != nil {
		if _, err := parseConfigValue(sp, value); err != nil {
			if sp.kind == kGroups { // the reason (a column named twice) helps
				return fmt.Errorf("%s = %q: expected %s (%v)", key, value, sp.describe(), err)
			}
			return fmt.Errorf("%s = %q: expected %s", key, value, sp.describe())
		}
		return nil
	}
	if !strings.HasPrefix(key, "lance.") {
		return nil
	}
	best, dist := "", -1
	owned := false
	ns := key[:strings.LastIndex(key, ".")+1] // "lance.compactoin." of "lance.compactoin.x"
	for _, k := range knownConfigKeys() {
		kns := k[:strings.LastIndex(k, ".")+1]
		// A key in a namespace lanced reads, or in one a few letters
		// away from it (a misspelled namespace), is lanced's to check.
		if strings.HasPrefix(key, kns) || (len(ns) > len("lance.") && levenshtein.Distance(ns, kns, nil) <= 2) {
			owned = true
		}
		if d := levenshtein.Distance(key, k, nil); dist < 0 || d < dist {
			best, dist = k, d
		}
	}
	const close = 3
	if !owned && dist > close {
		return nil
	}
	msg := fmt.Sprintf("unknown table config key %q", key)
	if dist <= close {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Errorf("%s", msg)
}
