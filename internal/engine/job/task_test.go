package job

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTaskJSONRoundTrip(t *testing.T) {
	tasks := []Task{
		{Rewrite: &RewriteTask{Table: "s3://b/t", ReadVersion: 7, Fragments: []uint64{3, 4, 5, 9}, TargetRowsPerFragment: 1 << 20, MaterializeDeletions: true, IndexCoverage: "keep"}},
		{Repack: &RepackTask{Table: "file:///x/y", ReadVersion: 2, Fragment: 1, Files: []RepackFile{{Columns: []int32{3, 4}, Fields: []int32{3, 4}, Sources: []string{"d.lance", "e.lance"}}}, Removes: []string{"d.lance", "e.lance"}}},
	}
	for _, task := range tasks {
		b, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"format_version":1`) {
			t.Fatalf("no format version in %s", b)
		}
		var back Task
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Key() != task.Key() || back.Kind() != task.Kind() {
			t.Fatalf("round trip changed the task: %s vs %s", back.Key(), task.Key())
		}
		b2, _ := json.Marshal(back)
		if string(b2) != string(b) {
			t.Fatalf("re-encoding differs:\n%s\n%s", b, b2)
		}
	}
}

func TestTaskRefusesOtherReleases(t *testing.T) {
	cases := map[string]string{
		"newer version": `{"format_version":2,"kind":"rewrite","rewrite":{"table":"t","read_version":1,"fragments":[1],"target_rows_per_fragment":10,"materialize_deletions":true}}`,
		"no version":    `{"kind":"rewrite","rewrite":{"table":"t","read_version":1,"fragments":[1],"target_rows_per_fragment":10,"materialize_deletions":true}}`,
		"unknown kind":  `{"format_version":1,"kind":"reindex"}`,
		"unknown field": `{"format_version":1,"kind":"repack","repack":{"table":"t","read_version":1,"fragment":1,"files":[{"columns":[1],"fields":[1],"sources":["a"]}],"removes":[],"overlays":true}}`,
	}
	for name, in := range cases {
		var task Task
		err := json.Unmarshal([]byte(in), &task)
		if !errors.Is(err, ErrTaskFormat) {
			t.Errorf("%s: got %v, want ErrTaskFormat", name, err)
		}
	}
	var task Task
	err := json.Unmarshal([]byte(`{"format_version":1,"kind":"rewrite","rewrite":{"table":"t","read_version":1,"fragments":[],"target_rows_per_fragment":10,"materialize_deletions":true}}`), &task)
	if !errors.Is(err, ErrInvalidTask) {
		t.Errorf("empty rewrite: got %v, want ErrInvalidTask", err)
	}
}

func TestTaskKeyRoundTrip(t *testing.T) {
	task := Task{Rewrite: &RewriteTask{Table: "s3://bucket/a:b/t", ReadVersion: 12, Fragments: []uint64{9, 1, 2, 3, 7}, TargetRowsPerFragment: 5}}
	key := task.Key()
	if key != "rewrite:12:1-3,7,9:s3://bucket/a:b/t" {
		t.Fatalf("key %q", key)
	}
	k, err := ParseTaskKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if k.Table != "s3://bucket/a:b/t" || k.ReadVersion != 12 || k.Kind != KindRewrite || len(k.Fragments) != 5 || k.Fragments[3] != 7 {
		t.Fatalf("parsed %+v", k)
	}
	for _, bad := range []string{"", "rewrite:x:1:t", "rewrite:1:3-1:t", "rewrite:1:a:t"} {
		if _, err := ParseTaskKey(bad); err == nil {
			t.Errorf("ParseTaskKey(%q) accepted", bad)
		}
	}
}
