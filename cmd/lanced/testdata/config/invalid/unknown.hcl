tables  = ["/srv/lance"]
worker  = 3 # ERROR: Unsupported argument
