# Per-table policies. The most specific glob wins for each setting it sets;
# everything else falls through to table config, then defaults.

# Event tables: many small appends, frequent deletes, one embedding column.
table "s3://lake/events/*" {
  compaction {
    target_rows_per_fragment        = 2000000
    materialize_deletions_threshold = 0.2
    # These tables are queried through a scalar index on event_id that a
    # nightly Lance optimize rebuilds, so rewriting indexed fragments is fine.
    index_coverage = "unindex"
  }
  repack {
    max_data_files_per_fragment = 4
    # Keep the wide embedding in a file of its own, caption and tags together.
    column_groups = [["embedding"], ["caption", "tags"]]
  }
  schedule {
    # Only rewrite at night (UTC) on weekdays, any time at weekends.
    windows = ["Mon-Fri 01:00-05:00", "Sat,Sun 00:00-24:00"]
  }
}

# The feature store is backfilled column by column: repack only.
table "s3://lake/features/**" {
  scope = "repack"
  repack {
    max_data_files_per_fragment = 2
  }
}

# Scratch tables: keep little history.
table "file:///var/lib/scratch/*" {
  cleanup {
    older_than    = "1d"
    keep_versions = 1
  }
}

# An archive nobody should touch.
table "s3://lake/archive/**" {
  enabled = false
}
