// Package job is the engine's job model, shared by the planner
// (internal/scheduler/plan) and the engine; it does no I/O.
//
// A Task is what to do, planned against a read version (the wire union of
// RewriteTask, RepackTask, RemapTask, CatchUpTask, SliceTask and JoinTask,
// with a stable dedup Key). A CatchUpTask adds unindexed rows to one index
// (or merges its segments) and commits as a CreateIndex (CatchUpTxn). A
// RemapTask rewrites one index segment for rewrites whose new fragment ids
// were reserved; its RemapOutput joins RewriteTxn (joinRemaps, applyRemaps
// in remap.go). An executed task is
// a Job (RewriteOutput, RepackOutput, CatchUpOutput): the files it wrote, how it judges a
// transaction someone else committed after its read version (Classify,
// Lance's conflict rules), and the Op it is committed in. An Op
// (RewriteTxn, RepackTxn, CatchUpTxn) builds one transaction's manifest from the latest
// manifest and the live jobs (ApplyRewrite, ApplyRepacks), refuses jobs the
// latest manifest no longer fits (RepackRebase), and verifies the committed
// result (VerifyRewrite, VerifyRepack). Result and EncodeResult carry a job
// from a worker to the committer with its fragments as protobuf bytes, so
// unknown fields survive the trip.
//
// A RewriteTask of one fragment or a RepackTask with Slices is run as
// SliceTasks (one per row range; a SliceOutput lists the file pieces it
// wrote) and one JoinTask (NewJoin) whose output is the parent's kind of
// output with Join set (slice.go).
//
// Adding a kind: a Task field and Kind, an output type implementing Job,
// and either a new Op (appended to Ops in commit order) or a case in an
// existing Op's Build (an index remap contributes its rewritten indices to
// RewriteTxn's Build). engine.CommitJobs then commits it unchanged.
package job
