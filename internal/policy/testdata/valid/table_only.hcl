# resolve: gs://bucket/tables/a
# resolve: gs://bucket/tables/b
table "gs://bucket/tables/a" {
  compaction {
    max_rows_per_file  = 100000
    max_rows_per_group = 4096
    max_bytes_per_file = 1073741824
    commit_batch_tasks = 20
    max_source_rows    = 10000000
    materialize_deletions = false
  }
  cleanup {
    keep_tagged      = false
    unverified_after = "2weeks"
  }
  schedule {
    max_delay    = "30m"
    min_interval = "10m"
  }
}
