package main

import (
	"log"
	"os"
	"path/filepath"
)

// cachedTable returns the path of table name (<dir>/t.lance), built by
// build(path) under work, or, with a cache directory, kept there and reused:
// a directory per table, complete once its .done marker exists (a build
// that did not finish is removed and started again).
func cachedTable(name, work, cache string, build func(table string)) string {
	dir := filepath.Join(work, name)
	if cache != "" {
		dir = filepath.Join(cache, name)
		if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
			log.Printf("reusing %s from %s", name, dir)
			return filepath.Join(dir, "t.lance")
		}
		_ = os.RemoveAll(dir)
	}
	build(filepath.Join(dir, "t.lance"))
	if cache != "" {
		if err := os.WriteFile(filepath.Join(dir, ".done"), nil, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	return filepath.Join(dir, "t.lance")
}
