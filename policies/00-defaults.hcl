# lanced policy: defaults for every table this daemon maintains.
#
# Precedence, per setting: the most specific matching `table` block, then the
# table's own manifest config (lance.compaction.*, lance.auto_cleanup.*), then
# this block, then Lance's defaults. `lanced policy explain URI` shows which
# layer set each value. Sizes take B/KB/MB/GB/TB or KiB/MiB/GiB/TiB; durations
# take Go syntax plus days and weeks ("168h", "7d", "2weeks").

defaults {
  # Maintain every table unless a table block says otherwise.
  enabled = true
  # all | rewrite | repack: which kinds of task the planner may emit.
  scope = "all"

  compaction {
    # Lance's own defaults, spelled out.
    target_rows_per_fragment        = 1048576
    max_rows_per_group              = 1024
    materialize_deletions           = true
    materialize_deletions_threshold = 0.1
    # remap: rewrite fragments covered by an index and remap its files in
    # the same commit (index types lanced cannot remap yet keep theirs).
    # keep: fragments covered by an index are left alone. unindex: rewrite
    # them anyway; the new fragments are unindexed until Lance's optimize
    # re-covers them.
    index_coverage = "remap"
    # Cap one plan: whole tasks are taken in order until the
    # next one would pass a limit; the rest waits for the next run.
    max_source_fragments = 1000
    max_source_bytes     = "64GiB"
    # Commit results in batches of this many tasks.
    commit_batch_tasks = 20
  }

  repack {
    # Repack a fragment whose columns sit in more than this many data files
    # (every add_columns backfill adds one).
    max_data_files_per_fragment = 8
  }

  cleanup {
    older_than       = "168h"
    keep_versions    = 5
    keep_tagged      = true
    unverified_after = "7d"
    # Object deletes per second.
    delete_rate = 100
  }

  schedule {
    # Wait for writes to settle, but never longer than max_delay after the
    # first change; at most one run per min_interval.
    debounce     = "30s"
    max_delay    = "10m"
    min_interval = "5m"
  }
}
