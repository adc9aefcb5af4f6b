package plan

import (
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// repackTask turns planned new files (top-level column ids each) into an
// engine task: the fields each new file takes, the files it reads, and the
// files the commit drops because the move leaves them with no schema field
// and no spilled lineage.
func repackTask(table string, readVersion uint64, s *schema, frag *tablepb.DataFragment, files [][]int32) job.RepackTask {
	t := job.RepackTask{Table: table, ReadVersion: readVersion, Fragment: frag.GetId()}
	movedAll := map[int32]bool{}
	read := map[string]bool{}
	for _, cols := range files {
		moved := map[int32]bool{}
		for _, c := range cols {
			for id := range s.subtree[c] {
				moved[id] = true
				movedAll[id] = true
			}
		}
		var fields []int32
		for _, id := range s.order {
			if moved[id] {
				fields = append(fields, id)
			}
		}
		var sources []string
		for _, f := range frag.GetFiles() {
			for _, id := range f.GetFields() {
				if id >= 0 && moved[id] {
					sources = append(sources, f.GetPath())
					if !read[f.GetPath()] {
						read[f.GetPath()] = true
						t.Bytes += f.GetFileSizeBytes()
					}
					break
				}
			}
		}
		t.Files = append(t.Files, job.RepackFile{Columns: cols, Fields: fields, Sources: sources})
	}
	t.Removes = []string{}
	for _, f := range frag.GetFiles() {
		keep := false
		for _, id := range f.GetFields() {
			if (s.ids[id] && !movedAll[id]) || isLineageID(id) {
				keep = true
				break
			}
		}
		if !keep {
			t.Removes = append(t.Removes, f.GetPath())
		}
	}
	return t
}
