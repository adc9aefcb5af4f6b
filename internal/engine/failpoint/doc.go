// Package failpoint provides crash points for kill tests: Hit(name) kills
// the process with SIGKILL when LANCED_FAILPOINT names that point; and
// test hooks: HitContext(ctx, name) also runs the function WithHook put on
// ctx for that point (a concurrent commit landed at an exact moment).
package failpoint
