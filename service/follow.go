package service

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/sandq/sandq/jobs"
)

// Event is one step of following a job (see [Service.Follow]): exactly one
// field is set.
type Event struct {
	// Status is the job's status, at the start and on each change.
	Status jobs.Status
	// Output is a chunk of live output (or of the stored Result's output,
	// for a job that was not streamed: FromResult).
	Output *jobs.StreamEntry
	// Result is the job's final view, the last event.
	Result *JobView
}

// Follow is a follower of one job's events, holding one of the process's
// MaxStreams follower slots until Events ends or Close is called.
type Follow struct {
	s       *Service
	c       Caller
	r       jobs.Result // as stored
	after   string
	release func()
}

// Follow starts following c's job id after the live output entry after
// ("" from the start): NotFound for an unknown job, TooMany when c's
// tenant follows MaxStreamsPerTenant jobs in this process already,
// Unavailable when the process follows MaxStreams.
func (s *Service) Follow(ctx context.Context, c Caller, id, after string) (*Follow, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	r, err := s.cfg.Client.Get(ctx, c.StoredID(id))
	if err == nil && !c.owns(r) {
		err = jobs.ErrNotFound
	}
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return nil, newError(NotFound, "no job %s", id)
	case err != nil:
		return nil, unavailable("cannot read the job", err)
	}
	release, err := s.streams.take(c.Tenant)
	if err != nil {
		return nil, err
	}
	return &Follow{s: s, c: c, r: r, after: after, release: release}, nil
}

// Close gives the follower's slot back; Events does at its end.
func (f *Follow) Close() { f.release() }

// Events yields the job's status, its live output as it comes and status
// changes (polled each second), and its final view last. It ends early
// when ctx ends or the output cannot be read (Redis failing: the caller
// follows again after the last entry it got).
func (f *Follow) Events(ctx context.Context) iter.Seq[Event] {
	return func(yield func(Event) bool) {
		defer f.Close()
		s, r := f.s, f.r
		status := r.Status
		if !yield(Event{Status: status}) {
			return
		}
		entries := make(chan jobs.StreamEntry, 64)
		streamCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(entries)
			for e, err := range s.cfg.StreamClient.Stream(streamCtx, r.ID, f.after) {
				if err != nil {
					return
				}
				select {
				case entries <- e:
				case <-streamCtx.Done():
					return
				}
				if e.End() {
					return
				}
			}
		}()
		poll := time.NewTicker(time.Second)
		defer poll.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
				if status.Final() {
					continue
				}
				if cur, err := s.cfg.Client.Get(ctx, r.ID); err == nil && cur.Status != status && !cur.Status.Final() {
					status = cur.Status
					if !yield(Event{Status: status}) {
						return
					}
				}
			case e, ok := <-entries:
				if !ok {
					return
				}
				if !e.End() {
					if status == jobs.StatusQueued && !e.FromResult {
						status = jobs.StatusRunning
						if !yield(Event{Status: status}) {
							return
						}
					}
					if !yield(Event{Output: &e}) {
						return
					}
					continue
				}
				final, err := s.cfg.Client.Get(context.WithoutCancel(ctx), r.ID)
				if err != nil {
					return
				}
				if final.Status != status && !yield(Event{Status: final.Status}) {
					return
				}
				final.ID = f.c.ClientID(final.ID)
				final.Reason = f.c.clean(final.Reason)
				v := s.View(ctx, f.c, final)
				yield(Event{Result: &v})
				return
			}
		}
	}
}
