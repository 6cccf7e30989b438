// Package worker is sandq's worker: it turns a queued task into a run in a
// sandbox container and the run into a stored Result, serves stateful
// sessions, and runs the worker process as a Server.
//
// # Jobs
//
// Handler is the asynq handler of store.TypeExec tasks. It decodes and
// re-validates the job (a producer may not have used sandq's client),
// derives the container spec and the steps' limits from the job's limits
// (LimitsOf and SpecOf in plan.go: WarmSpec is the same function for a
// language's default job), installs the job's libraries, runs the steps
// through the narrow Sandbox interface of the container pool
// (*sandbox.Pool implements it; tests fake exactly that seam), uploads
// artifacts and stores the Result. A program's own failure, timeout or OOM
// kill is a result; invalid input is rejected once; infrastructure faults
// return an error so asynq retries them. A handler stopped by ErrShutdown
// writes nothing: asynq has requeued its task.
//
// # Sessions
//
// Sessions serves one worker's stateful sessions (session.go): it reads
// the worker's command list in Redis, runs each session's cells one at a
// time in the session's own container, from a pool of their own, and
// keeps the session registry's slots and heartbeat.
//
// # The worker process
//
// Server is the worker process that cmd/worker configures from its flags:
// it opens Redis and the container engine, builds the pools, the handler
// and the asynq server, runs the process's background loops, one file
// each, and shuts down in a documented order (see Server.Run):
//
//   - heartbeat.go: the owner heartbeat that tells every reconciler on the
//     engine to leave this worker's containers alone;
//   - archive.go: settling archived tasks (a final Result stored, the
//     payload deleted);
//   - libsgc.go: the collector of installed library sets past their bounds;
//   - artifactsweep.go: the artifact retention sweeper;
//   - versions.go: publishing the images' toolchain versions;
//   - metrics.go: the Prometheus metrics and the /metrics and /healthz
//     server;
//   - cancel.go: the handler's watch of cancel requests.
//
// The pools' reconcile loops run inside sandbox.Pool; the Server only
// configures them.
package worker
