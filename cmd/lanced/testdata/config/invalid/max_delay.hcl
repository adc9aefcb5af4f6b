tables = ["/srv/lance"]
events {
  debounce  = "2m"
  max_delay = "1m" # ERROR: max_delay below debounce
}
