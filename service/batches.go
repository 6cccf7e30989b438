package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Batches: many jobs in one request, their progress, and their results as
// they finish. A batch is a list of the caller's job IDs, recorded under
// the batch's ID (namespaced like a job's) for the result TTL. Each job is
// checked and enqueued on its own; the batch is admitted as a whole
// against the tenant's quota of jobs not yet final.

// BatchItem is the outcome of one job of a submitted batch.
type BatchItem struct {
	// Index is the job's position in the request.
	Index int
	// ID is the job's ID as the caller knows it; empty when the job was
	// refused before it had one.
	ID string
	// Status is queued, or the status of the caller's existing job with
	// this ID.
	Status jobs.Status
	// Err is why the job was not enqueued (a *Error: Invalid, Conflict
	// for an existing job, Unavailable).
	Err error
}

// BatchCreated is the outcome of [Service.SubmitBatch].
type BatchCreated struct {
	ID       string
	Total    int
	Enqueued int
	Items    []BatchItem
}

// BatchProgress is a batch's jobs per status.
type BatchProgress struct {
	ID      string              `json:"id"`
	Total   int                 `json:"total"`
	Done    int                 `json:"done" doc:"jobs with a final status"`
	Counts  map[jobs.Status]int `json:"counts" doc:"jobs per status"`
	Created time.Time           `json:"created"`
}

// SubmitBatch enqueues reqs as c's batch id (generated when empty). where
// names a job's place in the request for errors, given its index ("body[3]").
// Conflict when c has a batch of this ID; TooMany when the valid jobs
// would take c's tenant past its quota. A refused job is an item's error,
// not the batch's.
func (s *Service) SubmitBatch(ctx context.Context, c Caller, id string, reqs []JobRequest, where func(int) string) (BatchCreated, error) {
	if err := c.need(ScopeWrite); err != nil {
		return BatchCreated{}, err
	}
	switch {
	case len(reqs) == 0:
		return BatchCreated{}, newError(Invalid, "the batch has no jobs")
	case len(reqs) > s.cfg.MaxBatchJobs:
		return BatchCreated{}, newError(Invalid, "the batch has %d jobs; the cap is %d", len(reqs), s.cfg.MaxBatchJobs)
	}
	if err := c.checkClientID("batch", id); err != nil {
		return BatchCreated{}, err
	}
	if id == "" {
		id = "b" + jobs.NewID()
	}
	if exists, err := s.st.BatchExists(ctx, c.StoredID(id)); err != nil {
		return BatchCreated{}, unavailable("cannot read the batch", err)
	} else if exists {
		return BatchCreated{}, newError(Conflict, "the tenant already has a batch %s", id)
	}
	out := BatchCreated{ID: id, Total: len(reqs), Items: make([]BatchItem, len(reqs))}
	var valid []jobs.Job
	var pos []int
	hooks := map[int]*hookRequest{}
	for i, req := range reqs {
		out.Items[i].Index = i
		job, hook, err := s.prepare(ctx, c, req)
		if err != nil {
			out.Items[i].Err = at(err, where(i))
			continue
		}
		hooks[i] = hook
		valid, pos = append(valid, job), append(pos, i)
	}
	if err := s.precheck(ctx, c, len(valid)); err != nil {
		return BatchCreated{}, err
	}
	infos, err := s.cfg.Client.EnqueueBatchWith(ctx, valid, s.admission(c))
	if err != nil && len(infos) == 0 {
		return BatchCreated{}, s.enqueueError(c, err, len(valid))
	}
	var ids []string
	for j, info := range infos {
		it := &out.Items[pos[j]]
		it.ID = c.ClientID(info.ID)
		switch {
		case info.Err != nil:
			it.Err = at(s.enqueueError(c, info.Err, 1), where(pos[j]))
			continue
		case info.Existing:
			it.Status = info.Status
			it.Err = newError(Conflict, "the tenant already has a job %s (status %s)", it.ID, info.Status)
		default:
			it.Status = info.Status
			out.Enqueued++
			// Its webhook, once it is admitted (never for a job refused
			// or existing).
			if h := hooks[pos[j]]; h != nil {
				if err := s.hooks.register(ctx, info.ID, *h); err != nil {
					it.Err = unavailable("the job is enqueued, but its webhook could not be recorded", err)
				}
			}
		}
		ids = append(ids, info.ID)
	}
	set, err := s.st.CreateBatch(ctx, c.StoredID(id), store.Batch{Tenant: c.Tenant, Created: time.Now().UTC(), IDs: ids})
	if err != nil {
		return BatchCreated{}, unavailable("cannot record the batch", err)
	}
	if !set {
		return BatchCreated{}, newError(Conflict, "the tenant already has a batch %s (its jobs were enqueued: %d)", id, out.Enqueued)
	}
	return out, nil
}

// batch reads c's batch id: NotFound if c has none.
func (s *Service) batch(ctx context.Context, c Caller, id string) (store.Batch, error) {
	if err := c.need(ScopeRead); err != nil {
		return store.Batch{}, err
	}
	b, err := s.st.GetBatch(ctx, c.StoredID(id))
	switch {
	case errors.Is(err, store.ErrNoBatch):
		return b, newError(NotFound, "no batch %s", id)
	case err != nil:
		return b, unavailable("cannot read the batch", err)
	case !c.raw && b.Tenant != c.Tenant: // the operator's tools read every tenant's, as their jobs
		return b, newError(NotFound, "no batch %s", id)
	}
	return b, nil
}

// Batch returns c's batch id's progress: its jobs per status.
func (s *Service) Batch(ctx context.Context, c Caller, id string) (BatchProgress, error) {
	b, err := s.batch(ctx, c, id)
	if err != nil {
		return BatchProgress{}, err
	}
	p := BatchProgress{ID: id, Total: len(b.IDs), Counts: map[jobs.Status]int{}, Created: b.Created}
	statuses, err := s.st.Statuses(ctx, b.IDs)
	if err != nil {
		return BatchProgress{}, unavailable("cannot read the batch's jobs", err)
	}
	for _, st := range statuses {
		p.Counts[st]++
		if st.Final() {
			p.Done++
		}
	}
	return p, nil
}

// BatchResults checks c's batch id and returns a function that calls fn
// with each of its jobs' views as they end (those already final first),
// until every job has ended, fn fails or ctx ends.
func (s *Service) BatchResults(ctx context.Context, c Caller, id string) (func(ctx context.Context, fn func(JobView) error) error, error) {
	b, err := s.batch(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, fn func(JobView) error) error {
		return s.waitEach(ctx, b.IDs, func(r jobs.Result) error {
			if !c.owns(r) {
				return nil // never: a batch lists its own tenant's jobs
			}
			r.ID = c.ClientID(r.ID)
			r.Reason = c.clean(r.Reason)
			return fn(s.View(ctx, c, r))
		})
	}, nil
}
