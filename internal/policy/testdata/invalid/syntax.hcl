table "s3://g/*" {
  compaction {
    target_rows_per_fragment = = 3 # ERROR: Invalid expression
  }
}
