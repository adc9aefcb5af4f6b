defaults {
}
defaults { # ERROR: Duplicate defaults block
}
table "s3://[a-" { # ERROR: Invalid table glob
}
table "" { # ERROR: Invalid table glob
}
table "s3://f/*" {
  compaction {
  }
  compaction { # ERROR: Duplicate compaction block
  }
}
table "s3://f/*" { # ERROR: Duplicate table block
}
