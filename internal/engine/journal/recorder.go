package journal

import "context"

// Output recording: before a task creates an object, the engine tells the
// recorder in the context (the pending-output journal when Compact runs with
// one), so a crash between the upload and the commit leaves a record of
// every file no manifest references yet.

type outputRecorderKey struct{}

type outputRecorder func(ctx context.Context, key string) error

func WithOutputRecorder(ctx context.Context, fn outputRecorder) context.Context {
	return context.WithValue(ctx, outputRecorderKey{}, fn)
}

func RecordOutput(ctx context.Context, key string) error {
	if fn, ok := ctx.Value(outputRecorderKey{}).(outputRecorder); ok && fn != nil {
		return fn(ctx, key)
	}
	return nil
}

// WithTaskJournal returns the context a task runs in: every output the
// task creates is first recorded in j under the task's key. A nil journal
// returns ctx unchanged.
func WithTaskJournal(ctx context.Context, j *TaskJournal, key string) context.Context {
	if j == nil {
		return ctx
	}
	return WithOutputRecorder(ctx, func(ctx context.Context, k string) error {
		return j.RecordPending(ctx, key, []string{k})
	})
}
