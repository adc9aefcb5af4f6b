tables = ["/srv/lance"]
nats {
  embedded = true
  url      = "nats://a:4222" # ERROR: Conflicting NATS settings
}
http {
  listen = "9464" # ERROR: Invalid listen address
}
log {
  level  = "loud" # ERROR: Invalid log level
  format = "xml"  # ERROR: Invalid log format
}
