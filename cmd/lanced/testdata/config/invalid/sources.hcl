tables = ["/srv/lance", "ftp://x/y"] # ERROR: Invalid table root
source "poll" {
  interval = "10m"
  url      = "awssqs://q" # ERROR: Unsupported argument
}
source "pubsub" { # ERROR: Missing subscription URL
}
source "kafka" { # ERROR: Unknown source kind
}
source "nats" { # ERROR: Missing NATS subject
  stream = "EV"
}
