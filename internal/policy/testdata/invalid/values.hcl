table "s3://d/*" {
  compaction {
    max_bytes_per_file = "90 GB please" # ERROR: Invalid size
    max_source_bytes = "lots" # ERROR: Invalid size
  }
  cleanup {
    older_than = "a week" # ERROR: Invalid duration
    unverified_after = "7" # ERROR: Invalid duration
  }
  schedule {
    windows = ["Funday 01:00-02:00"] # ERROR: Invalid window
  }
  repack {
    column_groups = [["a", "b"], ["c", "a"]] # ERROR: Column named twice
  }
}
table "s3://e/*" {
  repack {
    column_groups = [["x", "x"]] # ERROR: Column named twice
  }
}
