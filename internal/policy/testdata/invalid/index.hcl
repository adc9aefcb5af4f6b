table "s3://lake/a" {
  index {
    max_unindexed_rows = 0 # ERROR: Invalid value
  }
}
table "s3://lake/b" {
  index {
    max_unindexed_fraction = 1.5 # ERROR: Value out of range
  }
}
table "s3://lake/c" {
  index {
    max_segments = 2.5 # ERROR: Invalid value
    retrain      = "yes" # ERROR: Unsuitable value type
  }
}
table "s3://lake/d" {
  index {
    rebuild = true # ERROR: Unsupported argument
  }
}
table "s3://lake/e" {
  scope = "indices" # ERROR: Invalid value
}
table "s3://lake/f" {
  index {
    retrain         = true # ERROR: Unsupported value
    drift_threshold = 0 # ERROR: Value out of range
  }
}
