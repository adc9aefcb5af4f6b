// Package failpoint provides crash points for kill tests: Hit(name) kills
// the process with SIGKILL when LANCED_FAILPOINT names that point.
package failpoint
