// Package client is sandq's Go client for producers: enqueue jobs (one or
// a batch, idempotent by ID), read, await and cancel them, follow their
// live output, and open and drive sessions. It talks to Redis through the
// store (internal/store) and asynq; any producer in another language can
// do the same with any Redis client (GET sandq:result:<id>, SUBSCRIBE
// sandq:done:<id>).
//
// # Why it works this way
//
// Lifecycle and "first final wins". A job's Result is written queued by
// the producer, running by a worker at each attempt, and final once. The
// store refuses to replace a final Result (one Lua script checks and
// writes), so when asynq hands a job to a second worker after the first
// lost its lease, exactly one final Result exists, and a worker whose
// "running" write is refused knows the job is over (for example canceled)
// and does not run it.
//
// Idempotent enqueue. The queued Result doubles as the claim on an ID: it
// is created with SET NX semantics before the task is enqueued with
// TaskID = ID, and asynq refuses a second task with that ID while the
// first is pending, active, retrying or archived. Together they cover the
// whole life of a job: in the queue (asynq), and after it until the
// result TTL (the result key). No asynq Retention is used, so a finished
// task's payload (up to 11 MiB) is not kept twice.
//
// Waiting without polling. Wait subscribes to the job's done channel,
// waits for the subscription to be confirmed, then reads the Result: a
// Result stored before the read is seen by the read, one stored after it
// by the subscription. WaitEach awaits many jobs over one connection.
//
// Cancel. A queued job is deleted from asynq and gets a final canceled
// Result. A running one is signalled three ways, each covering a failure
// of another: the cancel channel (every worker subscribes; the one running
// the job kills the program at once), the cancel key (a later attempt will
// not start), and asynq's CancelProcessing (the handler's context is
// canceled, when asynq next looks). The worker then stores the canceled
// Result with the output so far.
package client
