package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// gcsOperation names a request's JSON-API method
// (https://cloud.google.com/storage/docs/json_api/v1/objects) and the
// object name or list prefix it addresses. XML-API requests
// (/<bucket>/<object>) are named after the JSON method they correspond to.
func gcsOperation(req *http.Request) (op, key string) {
	q := req.URL.Query()
	p := req.URL.EscapedPath()
	unescape := func(s string) string { u, _ := url.PathUnescape(s); return u }
	for _, base := range []string{"/upload/storage/v1/b/", "/download/storage/v1/b/", "/storage/v1/b/"} {
		rest, ok := strings.CutPrefix(p, base)
		if !ok {
			continue
		}
		_, obj, hasObj := strings.Cut(rest, "/o")
		obj = strings.TrimPrefix(obj, "/")
		switch {
		case base == "/upload/storage/v1/b/":
			return "objects.insert", q.Get("name")
		case !hasObj:
			return "buckets." + strings.ToLower(req.Method), ""
		case obj == "" && req.Method == http.MethodGet:
			return "objects.list", q.Get("prefix")
		case obj == "" && req.Method == http.MethodPost:
			return "objects.insert", q.Get("name")
		case strings.Contains(obj, "/rewriteTo/"), strings.Contains(obj, "/copyTo/"):
			src, _, _ := strings.Cut(obj, "/")
			return "objects.rewrite", unescape(src)
		case strings.HasSuffix(obj, "/compose"):
			return "objects.compose", unescape(strings.TrimSuffix(obj, "/compose"))
		}
		switch req.Method {
		case http.MethodGet:
			return "objects.get", unescape(obj)
		case http.MethodDelete:
			return "objects.delete", unescape(obj)
		case http.MethodPatch, http.MethodPut:
			return "objects.patch", unescape(obj)
		}
		return req.Method + " " + p, unescape(obj)
	}
	// XML API: /<bucket>/<object>.
	_, obj, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		if obj == "" {
			return "objects.list", q.Get("prefix")
		}
		return "objects.get", unescape(obj)
	case http.MethodPut, http.MethodPost:
		return "objects.insert", unescape(obj)
	case http.MethodDelete:
		return "objects.delete", unescape(obj)
	}
	return req.Method + " " + p, unescape(obj)
}

// gcsPermissions maps JSON-API methods onto the IAM permissions that
// authorize them (https://cloud.google.com/storage/docs/json_api/v1/objects,
// each method's "Authorization scopes"/IAM permission section).
var gcsPermissions = map[string][]string{
	"objects.get":     {"storage.objects.get"},
	"objects.list":    {"storage.objects.list"},
	"objects.insert":  {"storage.objects.create"},
	"objects.delete":  {"storage.objects.delete"},
	"objects.patch":   {"storage.objects.update"},
	"objects.rewrite": {"storage.objects.get", "storage.objects.create"},
	"objects.compose": {"storage.objects.get", "storage.objects.create"},
	"buckets.get":     {"storage.buckets.get"},
}

// documentedGCSRole reads the custom role that docs/daemon.md documents
// (the json block after the "least-privilege-gcs" marker) and returns its
// permissions, and the IAM condition expression of the binding (the
// block's "condition" field).
func documentedGCSRole(t *testing.T) (perms []string, condition string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/daemon.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(doc, []byte("<!-- least-privilege-gcs -->"))
	if !ok {
		t.Fatal("docs/daemon.md: no least-privilege-gcs marker")
	}
	_, rest, _ = bytes.Cut(rest, []byte("```json\n"))
	block, _, ok := bytes.Cut(rest, []byte("```"))
	if !ok {
		t.Fatal("docs/daemon.md: no json block after the least-privilege-gcs marker")
	}
	var role struct {
		IncludedPermissions []string `json:"includedPermissions"`
	}
	if err := json.Unmarshal(block, &role); err != nil {
		t.Fatalf("docs/daemon.md: custom role: %v", err)
	}
	_, rest, _ = bytes.Cut(rest, []byte("<!-- least-privilege-gcs-condition -->"))
	_, rest, _ = bytes.Cut(rest, []byte("```\n"))
	cond, _, _ := bytes.Cut(rest, []byte("```"))
	perms = slices.Clone(role.IncludedPermissions)
	slices.Sort(perms)
	return slices.Compact(perms), strings.TrimSpace(string(cond))
}

// TestGCSOperationsMatchDocumentedLeastPrivilege records every GCS request
// lanced makes while compacting and cleaning real-Lance tables in the GCS
// emulator and checks that the IAM permissions they need are exactly the
// ones the documented custom role includes, and that every object name and
// list prefix lies under the tables' prefix, as the documented IAM
// condition requires.
func TestGCSOperationsMatchDocumentedLeastPrivilege(t *testing.T) {
	oracle.Require(t)
	rec := &opRecorder{name: func(req *http.Request) (string, []string) {
		op, key := gcsOperation(req)
		return op, []string{key}
	}}
	gcs := storetest.StartGCSWith(t, func(h http.Handler) http.Handler {
		rec.next = h
		return rec
	})
	so := oracle.Options{StorageOptions: gcs.LanceStorageOptions()}
	const prefix = "warehouse"
	var uris []string
	for _, sc := range []string{"appends", "deletes_arrow"} {
		lance := oracle.Build(t, sc, gcs.LanceURI(prefix), so)
		uris = append(uris, gcs.URI(strings.TrimPrefix(lance, "gs://"+storetest.BucketName+"/")))
	}

	rec.start()
	compactAndCleanup(t, uris)
	ops, keys := rec.recorded()
	t.Logf("GCS operations during compact + cleanup: %v", ops)
	documented, cond := documentedGCSRole(t)
	checkPrivileges(t, ops, func(op string) []string { return gcsPermissions[op] },
		[]string{"storage.objects.get", "storage.objects.list", "storage.objects.create", "storage.objects.delete"},
		documented, nil)
	checkKeysUnder(t, keys, prefix)
	for _, want := range []string{`resource.name.startsWith("projects/_/buckets/BUCKET/objects/PREFIX/")`, `"storage.googleapis.com/objectListPrefix"`} {
		if !strings.Contains(cond, want) {
			t.Errorf("documented IAM condition %q lacks %s", cond, want)
		}
	}
}
