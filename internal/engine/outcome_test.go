package engine_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/fm"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/store"
)

// Every exported Err* of every package under internal/ and cmd/ has one
// outcome: the engine's errors (and the format and store errors under it)
// are classified here, each with the outcome it must get; the errors of
// the layers above the engine are listed with the package that owns their
// handling. A new error that is in neither list fails this test.
func TestEveryErrorHasOneOutcome(t *testing.T) {
	classified := map[string]struct {
		err  error
		want engine.Outcome
	}{
		"engine/job.ErrInvariant":                     {job.ErrInvariant, engine.Hold},
		"engine/hold.ErrHeld":                         {hold.ErrHeld, engine.Hold},
		"format.ErrCorrupt":                           {format.ErrCorrupt, engine.Quarantine},
		"format/lancefile.ErrCorrupt":                 {lancefile.ErrCorrupt, engine.Quarantine},
		"format/codec.ErrCorrupt":                     {codec.ErrCorrupt, engine.Quarantine},
		"format/index/vector.ErrCorrupt":              {vector.ErrCorrupt, engine.Quarantine},
		"format/lancefile.ErrRowOutOfRange":           {lancefile.ErrRowOutOfRange, engine.Quarantine},
		"engine/cleanup.ErrCleanupManifestUnreadable": {cleanup.ErrCleanupManifestUnreadable, engine.Quarantine},
		"engine/job.ErrUnsupported":                   {job.ErrUnsupported, engine.Skip},
		"format.ErrUnsupportedFeature":                {format.ErrUnsupportedFeature, engine.Skip},
		"format.ErrMixedNaming":                       {format.ErrMixedNaming, engine.Skip},
		"format.ErrExternalRowMeta":                   {format.ErrExternalRowMeta, engine.Skip},
		"format.ErrNotManifest":                       {format.ErrNotManifest, engine.Skip},
		"format/lancefile.ErrUnsupportedVersion":      {lancefile.ErrUnsupportedVersion, engine.Skip},
		"format/lancefile.ErrUnsupportedEncoding":     {lancefile.ErrUnsupportedEncoding, engine.Skip},
		"format/lancewrite.ErrUnsupportedType":        {lancewrite.ErrUnsupportedType, engine.Skip},
		"format/lancewrite.ErrCopyUnsupported":        {lancewrite.ErrCopyUnsupported, engine.Skip},
		"format/index/vector.ErrUnsupported":          {vector.ErrUnsupported, engine.Skip},
		"format/index/vector.ErrSplit":                {vector.ErrSplit, engine.Skip},
		"format/index/text.ErrUnsupported":            {text.ErrUnsupported, engine.Skip},
		"format/index/text.ErrCorrupt":                {text.ErrCorrupt, engine.Quarantine},
		"format/index/text.ErrTooLarge":               {text.ErrTooLarge, engine.Skip},
		"format/index/scalar.ErrCorrupt":              {scalar.ErrCorrupt, engine.Quarantine},
		"format/index/scalar.ErrUnsupported":          {scalar.ErrUnsupported, engine.Skip},
		"format/index/scalar.ErrTooLarge":             {scalar.ErrTooLarge, engine.Skip},
		"format/index/fm.ErrCorrupt":                  {fm.ErrCorrupt, engine.Quarantine},
		"format/index/fm.ErrUnsupported":              {fm.ErrUnsupported, engine.Skip},
		"format/index/fm.ErrTooLarge":                 {fm.ErrTooLarge, engine.Skip},
		"format/index.ErrNoRemapper":                  {index.ErrNoRemapper, engine.Skip},
		"format/index.ErrReuseExternal":               {index.ErrReuseExternal, engine.Skip},
		"format/index.ErrReuseTooLarge":               {index.ErrReuseTooLarge, engine.Skip},
		"engine/cleanup.ErrCleanupBranches":           {cleanup.ErrCleanupBranches, engine.Skip},
		"engine/cleanup.ErrCleanupBasePaths":          {cleanup.ErrCleanupBasePaths, engine.Skip},
		"engine/cleanup.ErrCleanupTaggedOld":          {cleanup.ErrCleanupTaggedOld, engine.Skip},
		"engine/job.ErrInvalidTask":                   {job.ErrInvalidTask, engine.Abandon},
		"engine/job.ErrTaskFormat":                    {job.ErrTaskFormat, engine.Abandon},
		"engine/job.ErrMixedTasks":                    {job.ErrMixedTasks, engine.Abandon},
		"format/lancewrite.ErrTypeMismatch":           {lancewrite.ErrTypeMismatch, engine.Abandon},
		"format/lancewrite.ErrClosed":                 {lancewrite.ErrClosed, engine.Abandon},
		"store.ErrInvalidKey":                         {store.ErrInvalidKey, engine.Abandon},
		"engine/job.ErrStale":                         {job.ErrStale, engine.Drop},
		"engine/table.ErrNoTable":                     {table.ErrNoTable, engine.Drop},
		"engine/table.ErrNoTransaction":               {table.ErrNoTransaction, engine.Drop},
		"engine/cleanup.ErrCleanupNoVersions":         {cleanup.ErrCleanupNoVersions, engine.Drop},
		"store.ErrClosed":                             {store.ErrClosed, engine.Drop},
		"store.ErrNotFound":                           {store.ErrNotFound, engine.Drop},
		"engine/table.ErrConfigConflict":              {table.ErrConfigConflict, engine.Retry},
		"store.ErrPreconditionFailed":                 {store.ErrPreconditionFailed, engine.Retry},
	}
	// Errors the engine never returns; their handling lives in the named
	// package.
	above := map[string]string{
		"scheduler.ErrStale":               "scheduler's disposition",
		"scheduler.ErrIncompatible":        "scheduler's disposition",
		"scheduler.ErrInvalidTask":         "scheduler's disposition",
		"scheduler.ErrCorrupt":             "scheduler's disposition",
		"scheduler.ErrInvalidTaskEnvelope": "scheduler's disposition",
		"scheduler.ErrLeaseLost":           "scheduler's coordinator (lease handover)",
		"scheduler.ErrInvalidConfig":       "scheduler.Start (configuration)",
		"scheduler/plan.ErrPlanFormat":     "plan.Decode (lanced plan --json readers)",
		"watch/event.ErrUndecodable":       "watch (event decoding, dropped with a log line)",
		"watch/event.ErrNotCreated":        "watch (event filtering)",
		"watch/event.ErrNotManifest":       "watch (event filtering)",
		"watch/event.ErrUnsafeKey":         "watch (event filtering)",
		"watch/event.ErrOutsideRoots":      "watch (event filtering)",
		"watch/event.ErrBranch":            "watch (event filtering)",
		"watch.ErrUndecodable":             "watch (alias of watch/event)",
		"watch.ErrNotCreated":              "watch (alias of watch/event)",
		"watch.ErrNotManifest":             "watch (alias of watch/event)",
		"watch.ErrUnsafeKey":               "watch (alias of watch/event)",
		"watch.ErrOutsideRoots":            "watch (alias of watch/event)",
		"watch.ErrBranch":                  "watch (alias of watch/event)",
	}
	found := exportedErrors(t)
	if len(found) < len(classified) {
		t.Fatalf("found %d exported errors in the tree, fewer than the %d classified", len(found), len(classified))
	}
	for name := range found {
		_, c := classified[name]
		_, a := above[name]
		if !c && !a {
			t.Errorf("%s has no outcome: add it to engine.Classify and this test, or to the list of errors handled above the engine", name)
		}
	}
	for name, c := range classified {
		if !found[name] {
			t.Errorf("%s is classified but no longer exists", name)
		}
		wrapped := fmt.Errorf("task x: %w", &engine.FragmentError{Fragment: 3, File: "data/a.lance", Err: c.err})
		if got := engine.Classify(wrapped); got != c.want {
			t.Errorf("Classify(%s) = %s, want %s", name, got, c.want)
		}
	}
	for name := range above {
		if !found[name] {
			t.Errorf("%s is listed but no longer exists", name)
		}
	}
	if got := engine.Classify(context.DeadlineExceeded); got != engine.Retry {
		t.Errorf("deadline: %s", got)
	}
	if got := engine.Classify(fmt.Errorf("something new")); got != engine.Retry {
		t.Errorf("unknown error: %s, want retry", got)
	}
}

// exportedErrors lists the package-level exported variables named Err* in
// the non-test sources of internal/ and cmd/, as "<dir under internal/ or
// cmd/>.<name>".
func exportedErrors(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, top := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" || d.Name() == "node_modules" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(top, filepath.Dir(path))
			pkg := filepath.ToSlash(rel)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
							out[pkg+"."+n.Name] = true
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
