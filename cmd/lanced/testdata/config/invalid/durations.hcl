tables = ["/srv/lance"]
events {
  debounce  = "soon" # ERROR: Invalid duration
  max_delay = "1m"
}
queue {
  ack_wait    = "-5s" # ERROR: Invalid duration
  max_deliver = 0     # ERROR: Invalid number
  lease_ttl   = "1s"  # ERROR: lease_ttl too short
}
