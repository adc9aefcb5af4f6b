# /etc/lanced/lanced.hcl — lanced run --config /etc/lanced/lanced.hcl
# Relative paths are taken relative to this file's directory.

# JetStream store and reports. systemd's StateDirectory=lanced creates it.
state_dir = "/var/lib/lanced"

# Table roots: a directory of *.lance tables, or one table, as a path or a
# file://, s3:// or gs:// URI. Events for tables outside these roots are
# dropped.
tables = [
  "/srv/lance",
  # "s3://lake/tables",
  # "gs://lake-gcs/tables",
]

# Policy directory (*.hcl), reloaded on change and on SIGHUP
# (systemctl reload lanced). Omit to use Lance's defaults everywhere.
# policies = "/etc/lanced/policies"

# Tasks this node executes at once.
workers = 2

nats {
  # The default: run NATS with JetStream inside the daemon, stored under
  # state_dir/jetstream.
  embedded = true
  # Let other lanced nodes join this one's server. An open listener must
  # authenticate: user + password_file, nkey_seed_file (+ authorized_nkeys
  # of the other nodes) and/or tls with verify_clients; insecure = true
  # accepts anyone (logged as a warning).
  # listen           = "0.0.0.0:4222"
  # nkey_seed_file   = "/etc/lanced/nats.nk"
  # authorized_nkeys = ["UD...other node's public key"]
  # tls {
  #   ca_file        = "/etc/lanced/nats-ca.pem"
  #   cert_file      = "/etc/lanced/nats-server.pem"
  #   key_file       = "/etc/lanced/nats-server-key.pem"
  #   verify_clients = true
  # }

  # Or join a NATS cluster instead (then set embedded = false or omit it):
  # url         = "nats://nats-1:4222,nats://nats-2:4222"
  # credentials = "/etc/lanced/nats.creds"
  # tls {
  #   ca_file   = "/etc/lanced/nats-ca.pem"
  #   cert_file = "/etc/lanced/nats-client.pem"
  #   key_file  = "/etc/lanced/nats-client-key.pem"
  # }
}

# Event sources. A poll sweep over the roots catches what notifications
# miss; keep one even with notifications.
source "poll" {
  interval = "10m"
}
# S3 notifications through SQS (direct, SNS-wrapped or EventBridge):
# source "pubsub" {
#   url = "awssqs://sqs.us-east-1.amazonaws.com/123456789012/lanced?region=us-east-1"
# }
# GCS notifications through Pub/Sub:
# source "pubsub" {
#   url = "gcppubsub://projects/my-project/subscriptions/lanced"
# }
# Events on a NATS subject (JetStream-backed when stream is set):
# source "nats" {
#   subject = "s3.events.>"
#   stream  = "LANCED_EVENTS"
# }

# Per table, a burst of commits becomes one evaluation after debounce,
# never later than max_delay.
events {
  debounce  = "5s"
  max_delay = "1m"
}

queue {
  ack_wait           = "60s" # a task without heartbeat for this long is redelivered
  max_deliver        = 5     # then it goes to the LANCED_DEAD stream
  lease_ttl          = "30s" # coordinator lease per table
  table_in_flight    = 4     # tasks of one table queued or running
  max_queue_depth    = 1000  # stop enqueueing above this depth
  commit_batch_tasks = 8     # results per commit (policy commit_batch_tasks overrides)
  commit_max_wait    = "10s"
  drain_timeout      = "30s" # on SIGTERM, in-flight tasks get this long
  replicas           = 1     # JetStream replicas (3 on a 3-node NATS cluster)
}

http {
  listen = "127.0.0.1:9464" # /metrics, /healthz, /readyz; "" disables
}

log {
  level  = "info"
  format = "json" # journald-friendly; "text" for terminals
}
