package worker

import (
	"context"
	"sync"
	"time"
)

// runningJobs holds the cancel function of each job this worker is
// handling, so a cancel request reaches it at once.
type runningJobs struct {
	mu sync.Mutex
	m  map[string]*runningJob
}

// runningJob is one attempt's entry; its pointer identifies the attempt.
type runningJob struct{ cancel context.CancelCauseFunc }

func (r *runningJobs) add(id string, cancel context.CancelCauseFunc) *runningJob {
	j := &runningJob{cancel: cancel}
	r.mu.Lock()
	r.m[id] = j
	r.mu.Unlock()
	return j
}

// remove forgets id's entry if it is still j (a later attempt of the same
// job may have replaced it).
func (r *runningJobs) remove(id string, j *runningJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[id] == j {
		delete(r.m, id)
	}
}

// cancel ends job id's handler context with ErrCanceled; false when this
// worker is not handling id.
func (r *runningJobs) cancel(id string) bool {
	r.mu.Lock()
	j, ok := r.m[id]
	r.mu.Unlock()
	if ok {
		j.cancel(ErrCanceled)
	}
	return ok
}

// WatchCancels subscribes to the producers' cancel channel and cancels the
// jobs this worker is handling as their IDs arrive, so the agent kills the
// program within milliseconds of the request (client.Client.Cancel also
// cancels through asynq, which reaches the handler only at asynq's next
// poll of canceled tasks). It returns when ctx ends. Pub/sub is
// at-most-once: while the subscription is down (Redis restarting) a cancel
// still arrives through asynq and the cancel key.
func (h *Handler) WatchCancels(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		ids, err := h.cfg.Store.WatchCancels(ctx)
		if err != nil {
			h.cfg.Logger.Warn().Err(err).Msg("watch cancels; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		for id := range ids {
			if h.running.cancel(id) {
				h.cfg.Logger.Info().Str("job_id", id).Msg("cancel requested; killing the program")
			}
		}
	}
}
