defaults {
  compaction {
    target_rows = 10 # ERROR: Unsupported argument
  }
  colour = "red" # ERROR: Unsupported argument
  retention { # ERROR: Unsupported block type
  }
}
policy "x" { # ERROR: Unsupported block type
}
