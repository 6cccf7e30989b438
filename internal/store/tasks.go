package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/sandq/sandq/jobs"
)

// TypeExec is the asynq task type of a job. Its payload is the [jobs.Job] as
// JSON.
const TypeExec = "sandq:exec"

// TaskGrace is the fixed part of a task's asynq timeout: time for
// acquiring a container, writing input files, installing libraries and
// uploading artifacts. See [TaskTimeout].
const TaskGrace = 60 * time.Second

// ErrPoison marks a task payload that can never be processed: not JSON, not
// a Job, unknown fields, trailing data, or the wrong task type. It wraps
// asynq.SkipRetry, so a handler that returns an error wrapping ErrPoison
// makes asynq archive the task at once instead of retrying it. The handler
// is expected to store a "rejected" Result with the error as its reason
// before returning.
var ErrPoison = fmt.Errorf("jobs: poison payload: %w", asynq.SkipRetry)

// MaxInstallTimeout bounds a worker's library install timeout. A job that
// lists libraries gets this much more asynq timeout (see [TaskTimeout]),
// since the producer cannot know the worker's setting.
const MaxInstallTimeout = 10 * time.Minute

// TaskTimeout is the asynq timeout of a task running a job with limits l
// (zero limits use the default policy's): 2 × limits.timeout_ms +
// [TaskGrace]. One timeout budget is for the run step and one for a compile
// step; the grace covers set-up and upload. The agent enforces the real
// limits inside the container; this is only asynq's backstop, after which
// asynq cancels the handler's context and retries the task.
func TaskTimeout(l jobs.Limits) time.Duration {
	ms := l.TimeoutMS
	if ms <= 0 {
		// The worker fills it from its operator defaults, which may
		// exceed the built-in ones: allow for the largest built-in cap.
		ms = jobs.BuiltinCaps().TimeoutMS
	}
	return 2*time.Duration(ms)*time.Millisecond + TaskGrace
}

// taskTimeout is TaskTimeout, plus MaxInstallTimeout for a job that lists
// libraries.
func taskTimeout(j jobs.Job) time.Duration {
	t := TaskTimeout(j.Limits)
	if len(j.Libraries) > 0 {
		t += MaxInstallTimeout
	}
	return t
}

// NewTask encodes a normalized job (see [Policy.Normalize]) as an asynq
// task and returns it with its enqueue options: TaskID(j.ID),
// Queue(j.Queue), Timeout([TaskTimeout], plus [MaxInstallTimeout] when the
// job lists libraries) and MaxRetry(j.MaxRetry, or the
// default policy's if nil). Options in extra come last and so win; the
// client passes Queue([AsynqQueue]) there so its QueuePrefix applies.
//
// No Retention option is set: the result key is the job's durable record
// (see [Store]), and retaining the task would keep a second copy of its
// payload (up to 11 MiB of code and files) for nothing.
func NewTask(j jobs.Job, extra ...asynq.Option) (*asynq.Task, []asynq.Option) {
	payload, err := json.Marshal(j)
	if err != nil {
		// A Job holds only strings, numbers, maps of strings and byte
		// slices; Marshal cannot fail on it.
		panic(fmt.Sprintf("jobs: encode job %s: %v", j.ID, err))
	}
	retry := jobs.DefaultMaxRetry
	if j.MaxRetry != nil {
		retry = *j.MaxRetry
	}
	q := j.Queue
	if q == "" {
		q = jobs.QueueDefault
	}
	opts := []asynq.Option{
		asynq.TaskID(j.ID),
		asynq.Queue(string(q)),
		asynq.Timeout(taskTimeout(j)),
		asynq.MaxRetry(retry),
	}
	return asynq.NewTask(TypeExec, payload), append(opts, extra...)
}

// DecodeTask decodes a task's payload into a jobs.Job, strictly: the task type
// must be [TypeExec], the payload one JSON object with no unknown fields
// and nothing after it. Any failure wraps [ErrPoison] (and so
// asynq.SkipRetry). DecodeTask does not validate the job; call
// [Policy.Validate] next.
func DecodeTask(t *asynq.Task) (jobs.Job, error) {
	if t.Type() != TypeExec {
		return jobs.Job{}, fmt.Errorf("%w: task type %q, want %q", ErrPoison, t.Type(), TypeExec)
	}
	j, err := jobs.DecodeJob(t.Payload())
	if err != nil {
		return jobs.Job{}, fmt.Errorf("%w: %v", ErrPoison, err)
	}
	return j, nil
}

// queuePriority is the weight of each queue for asynq's weighted priority.
var queuePriority = map[jobs.Queue]int{jobs.QueueCritical: 6, jobs.QueueDefault: 3, jobs.QueueBatch: 1}

// AsynqQueue returns the asynq queue name for q. With an empty prefix (the
// production default) it is q itself, so asynqmon and the asynq CLI show
// "critical", "default" and "batch"; otherwise it is "<prefix>:<q>", which
// lets tests and side-by-side deployments share one Redis.
func AsynqQueue(prefix string, q jobs.Queue) string {
	if prefix == "" {
		return string(q)
	}
	return prefix + ":" + string(q)
}

// ServerQueues returns the asynq.Config.Queues map for a worker: every
// queue under prefix with weights critical 6, default 3, batch 1.
func ServerQueues(prefix string) map[string]int {
	m := make(map[string]int, len(queuePriority))
	for q, p := range queuePriority {
		m[AsynqQueue(prefix, q)] = p
	}
	return m
}
