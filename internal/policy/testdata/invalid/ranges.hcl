table "s3://b/*" {
  compaction {
    materialize_deletions_threshold = 0 # ERROR: Value out of range
  }
  cleanup {
    delete_rate = -1 # ERROR: Value out of range
  }
  schedule {
    debounce  = "2h" # ERROR: Minimum above maximum
    max_delay = "1h"
  }
}
table "s3://c/*" {
  compaction {
    materialize_deletions_threshold = 1.5 # ERROR: Value out of range
    max_rows_per_group = 8192 # ERROR: Minimum above maximum
    max_rows_per_file  = 4096
  }
}
