package engine

import "context"

// Output recording: before a task creates an object, the engine tells the
// recorder in the context (the pending-output journal when Compact runs with
// one), so a crash between the upload and the commit leaves a record of
// every file no manifest references yet.

type outputRecorderKey struct{}

type outputRecorder func(ctx context.Context, key string) error

func withOutputRecorder(ctx context.Context, fn outputRecorder) context.Context {
	return context.WithValue(ctx, outputRecorderKey{}, fn)
}

func recordOutput(ctx context.Context, key string) error {
	if fn, ok := ctx.Value(outputRecorderKey{}).(outputRecorder); ok && fn != nil {
		return fn(ctx, key)
	}
	return nil
}
