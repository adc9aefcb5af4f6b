# resolve: s3://lake/events/clicks
# resolve: s3://lake/events/raw/2026
# resolve: s3://lake/other/t
# config: lance.compaction.max_data_files_per_fragment=4
# config: lance.compaction.column_groups=emb;cap,tags
# config: lance.auto_cleanup.older_than=14days
# config: lance.auto_cleanup.retain_versions=lots

defaults {
  compaction {
    target_rows_per_fragment = 500000
    max_source_bytes         = "90GiB"
  }
  repack {
    max_data_files_per_fragment = 8
  }
  cleanup {
    older_than = "168h"
    keep_versions = 3
  }
}

table "s3://lake/events/*" {
  scope = "rewrite"
  compaction {
    materialize_deletions_threshold = 0.25
    index_coverage                  = "unindex"
  }
  schedule {
    debounce = "1m"
    windows  = ["Mon-Fri 01:00-05:00", "Sat,Sun 00:00-24:00"]
  }
}

table "s3://lake/events/clicks" {
  compaction {
    target_rows_per_fragment = 2000000
    max_source_fragments     = 100
  }
  repack {
    column_groups = [["emb"], ["cap", "tags"]]
  }
}

table "s3://lake/**" {
  enabled = false
  cleanup {
    delete_rate = 50
  }
}
