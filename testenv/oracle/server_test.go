package oracle

import (
	"strings"
	"testing"
)

// TestServerRestartsAfterDeath: a dead node server is replaced on the next
// call, and a failing call reports Lance's error without killing it.
func TestServerRestartsAfterDeath(t *testing.T) {
	Require(t)
	if !serverEnabled() {
		t.Skip("LANCED_ORACLE_SERVER=0")
	}
	path := Build(t, "deletes_arrow", t.TempDir())
	want := Inspect(t, path, 0).Rows

	_, err := TryOps(t, path+"-missing.lance", []Op{{"op": "count_rows"}})
	if err == nil {
		t.Fatalf("ops on a missing table succeeded")
	}
	if !strings.Contains(err.Error(), "ops.mjs") {
		t.Errorf("error does not name the script: %v", err)
	}
	s, err := getServer()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.dead:
		t.Fatalf("a failing call killed the server")
	default:
	}

	s.kill()
	<-s.dead
	wantEq(t, "rows after restart", Inspect(t, path, 0).Rows, want)
	s2, err := getServer()
	if err != nil {
		t.Fatal(err)
	}
	if s2 == s {
		t.Errorf("dead server reused")
	}
}
