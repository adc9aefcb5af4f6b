package policy

import (
	"strings"
	"testing"
)

func TestCheckTableConfig(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"lance.compaction.max_data_files_per_fragment", "two", `lance.compaction.max_data_files_per_fragment = "two": expected a whole number >= 1`},
		{"lance.auto_cleanup.older_than", "soon", `lance.auto_cleanup.older_than = "soon": expected a duration`},
		{"lance.compaction.materialize_deletions_threshold", "2", `expected a number in (0, 1]`},
		{"lance.compaction.materialize_deletions", "yes", `expected true or false`},
		{"lance.auto_cleanup.retain_version", "3", `did you mean "lance.auto_cleanup.retain_versions"?`},
		{"lance.compacton.target_rows_per_fragment", "3", `did you mean "lance.compaction.target_rows_per_fragment"?`},
		{"lance.compaction.whatever_else", "3", `unknown table config key "lance.compaction.whatever_else"`},
		// A misspelled namespace, the key too far from any known one.
		{"lance.compactoin.x", "1", `unknown table config key "lance.compactoin.x"`},
		{"lance.auto_cleanp.keep", "1", `unknown table config key "lance.auto_cleanp.keep"`},
	} {
		err := CheckTableConfig(c.key, c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v, want %q", c.key, c.value, err, c.want)
		}
	}
	for _, kv := range [][2]string{
		{"lance.compaction.max_data_files_per_fragment", "4"},
		{"lance.auto_cleanup.older_than", "7d"},
		{"lance.auto_cleanup.interval", "20"},
		{"lance.auto_cleanup.referenced_branch", "main"},
		{"lance.file.version", "2.1"},
		{"owner", "data"},
	} {
		if err := CheckTableConfig(kv[0], kv[1]); err != nil {
			t.Errorf("%s=%s refused: %v", kv[0], kv[1], err)
		}
	}
}
