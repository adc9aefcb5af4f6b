table "s3://a/*" {
  enabled = "yes please" # ERROR: Unsuitable value type
  compaction {
    target_rows_per_fragment = "many" # ERROR: Unsuitable value type
    max_rows_per_group = 0 # ERROR: Invalid value
    max_source_fragments = 2.5 # ERROR: Invalid value
    index_coverage = "rebuild" # ERROR: Invalid value
  }
  scope = "everything" # ERROR: Invalid value
}
