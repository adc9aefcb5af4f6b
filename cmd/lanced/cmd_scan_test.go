package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// lanceJSON renders real Lance's scan the way lanced scan prints rows.
func lanceJSON(t *testing.T, tbl arrow.Table) []string {
	t.Helper()
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	var buf bytes.Buffer
	for tr.Next() {
		if err := array.RecordToJSON(tr.RecordBatch(), &buf); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

func TestScanCommandMatchesLance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the lance oracle")
	}
	oracle.Require(t)
	for _, c := range []struct {
		scenario string
		cols     []string
		limit    string
		version  uint64
	}{
		{"appends", []string{"id"}, "", 2},
		{"deletes_arrow", nil, "", 0},
		{"deletes_bitmap", []string{"id"}, "", 0},
		{"types", nil, "37", 0},
		{"v2_0", nil, "", 0},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			uri := oracle.Build(t, c.scenario, t.TempDir())
			want := lanceJSON(t, oracle.Scan(t, uri, c.version, c.cols))
			args := []string{uri}
			if c.version != 0 {
				args = append(args, "--version", fmt.Sprint(c.version))
			}
			if c.cols != nil {
				args = append(args, "--columns", strings.Join(c.cols, ","))
			}
			if c.limit != "" {
				args = append(args, "--limit", c.limit)
				want = want[:37]
			}
			var out, errb bytes.Buffer
			if err := runScan(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("scan: %v (%s)", err, errb.String())
			}
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(got) != len(want) {
				t.Fatalf("%d rows, real Lance has %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("row %d:\n got  %s\n want %s", i, got[i], want[i])
				}
			}
		})
	}
}

func TestScanCommandUsage(t *testing.T) {
	var out, errb bytes.Buffer
	err := runScan(context.Background(), nil, &out, &errb)
	if ee, ok := err.(exitError); !ok || ee.code != 2 {
		t.Fatalf("no URI: err %v, want exit 2", err)
	}
	if err := runScan(context.Background(), []string{t.TempDir()}, &out, &errb); err == nil {
		t.Fatal("scan of an empty directory succeeded")
	}
}
