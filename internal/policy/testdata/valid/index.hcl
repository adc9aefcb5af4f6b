# resolve: s3://lake/events
# resolve: s3://lake/other
defaults {
  index {
    max_unindexed_fraction = 0.05
  }
}
table "s3://lake/events" {
  scope = "index"
  index {
    max_unindexed_rows = 50000
    max_segments       = 4
    retrain            = false
    drift_threshold    = 0.3
    remap_part_bytes   = "64MiB"
    catchup_part_rows  = 100000
  }
}
