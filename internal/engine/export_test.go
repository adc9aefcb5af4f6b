package engine

// SetCatchUpMergeFanIn sets the most deltas a catch-up merge reads at once
// (tests fold few deltas) and returns what restores it.
func SetCatchUpMergeFanIn(n int) (restore func()) {
	old := catchUpMergeFanIn
	catchUpMergeFanIn = n
	return func() { catchUpMergeFanIn = old }
}
