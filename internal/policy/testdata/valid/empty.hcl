# resolve: file:///data/t
# An empty directory entry: every setting comes from Lance's defaults.
