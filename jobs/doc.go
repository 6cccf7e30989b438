// Package jobs is sandq's wire contract and its Redis side: the [Job] a
// producer enqueues, the [Result] a worker stores, how both look in Redis,
// and the [Client] that enqueues, reads, awaits and cancels jobs. It is the
// only sandq package that talks to Redis.
//
// # Contract
//
// A Job is JSON: language, code, stdin, args, env, input files, output
// globs, libraries, [Limits], isolation, queue, tags, tenant. Zero values
// mean "default"; [LimitTable] holds every limit's default, cap and
// minimum, an operator [Policy] may change the defaults and caps, and a job
// may lower a limit but never raise it above its cap. [Policy.Validate]
// checks every rule the worker enforces on a job's shape and reports the
// first broken one as a *[ValidationError] naming the field, the value and
// the bound; [Policy.Normalize] fills the defaults (a language's own first,
// then the operator's). Producers validate at enqueue with their Policy and
// workers again with theirs, which is the one that counts.
//
// A job travels as an asynq task of type [TypeExec] ("sandq:exec") whose
// payload is the Job JSON and whose task ID is the job ID, on one of three
// queues, critical > default > batch ([ServerQueues] gives the weights).
// [NewTask] sets the asynq timeout to 2 × timeout_ms + 60 s ([TaskTimeout])
// and the retry budget for infrastructure faults; user-code outcomes are
// results, never retries. [DecodeTask] is strict and marks undecodable
// payloads with [ErrPoison], which wraps asynq.SkipRetry.
//
// # Redis layout
//
// With P the key prefix (default "sandq"; tests use a random one):
//
//	P:result:<id>   string  Result JSON, TTL ResultTTL (default 24 h)
//	P:done:<id>     pub/sub final status, published when the final Result is stored
//	P:cancel        pub/sub job IDs canceled by producers
//	P:cancel:<id>   string  cancel request time (RFC 3339), TTL ResultTTL
//	P:langs         hash    toolchain versions published by workers
//	sandq-owner:<o> string  worker (container owner) o's heartbeat, TTL 30 s;
//	                        outside the prefix: one engine serves every namespace
//	asynq:{Q}:...   asynq's own keys; Q is critical, default or batch,
//	                prefixed "<QueuePrefix>:" when Config.QueuePrefix is set
//
// Results are plain JSON under a documented key so a producer in any
// language can read them with any Redis client (GET sandq:result:<id>) and
// await them with SUBSCRIBE sandq:done:<id> followed by a GET.
//
// # Why it works this way
//
// Lifecycle and "first final wins". A job's Result is written queued by the
// producer, running by a worker at each attempt, and final once. The store
// refuses to replace a final Result (one Lua script checks and writes), so
// when asynq hands a job to a second worker after the first lost its lease,
// exactly one final Result exists, and a worker whose "running" write is
// refused knows the job is over (for example canceled) and does not run
// it.
//
// Idempotent enqueue. The queued Result doubles as the claim on an ID: it
// is created with SET NX semantics before the task is enqueued with
// TaskID = ID, and asynq refuses a second task with that ID while the first
// is pending, active, retrying or archived. Together they cover the whole
// life of a job: in the queue (asynq), and after it until ResultTTL
// (the result key). No asynq Retention is used, so a finished task's
// payload (up to 11 MiB) is not kept twice.
//
// Waiting without polling. Wait subscribes to the done channel, waits for
// the subscription to be confirmed, then reads the Result: a Result stored
// before the read is seen by the read, one stored after it by the
// subscription.
//
// Cancel. A queued job is deleted from asynq and gets a final canceled
// Result. A running one is signalled three ways, each covering a failure
// of another: the P:cancel channel (every worker subscribes with
// [Store.WatchCancels]; the one running the job kills the program at
// once), the P:cancel:<id> key (a later attempt will not start), and
// asynq's CancelProcessing (the handler's context is canceled, when asynq
// next looks). The worker then stores the canceled Result with the output
// so far.
//
// The worker's asynq handler (package worker) is built on these pieces:
// [DecodeTask], [Policy], [Store.Put] (running, then final),
// [Store.CancelRequested] and [Store.WatchCancels].
package jobs
