package service

import (
	"context"
	"time"

	"github.com/sandq/sandq/jobs"
)

// waitEachRecheck is how often waitEach reads every awaited job again:
// for a job that ended without its end being published (asynq archived
// it after its last worker died), or one whose wake was missed.
const waitEachRecheck = 10 * time.Second

// waitEachLookups is how many awaited jobs that are not final waitEach
// looks up in asynq (client.Get) per recheck, so the cost stays bounded
// for very large batches.
const waitEachLookups = 100

// waitEach awaits the final Result of every job of ids and calls fn with
// each as it arrives, serially, in the order the jobs finish (those
// already final first), until every job has ended, fn fails or ctx ends.
// It holds no Redis connection of its own: the process's subscription
// (hub) wakes it, and it reads statuses (small) before Results.
func (s *Service) waitEach(ctx context.Context, ids []string, fn func(jobs.Result) error) error {
	pending := make(map[string]bool, len(ids))
	for _, id := range ids {
		pending[id] = true
	}
	w, forget, stop := s.hub.watchMany(ids)
	defer stop()
	// read reads the jobs of group that are pending and passes the final
	// ones to fn; with lookups, up to that many of the others are looked
	// up in asynq (client.Get), which knows of a job archived without a
	// final Result.
	read := func(group []string, lookups int) error {
		var todo []string
		for _, id := range group {
			if pending[id] {
				todo = append(todo, id)
			}
		}
		for len(todo) > 0 {
			part := todo[:min(len(todo), 1000)]
			todo = todo[len(part):]
			statuses, err := s.st.Statuses(ctx, part)
			if err != nil {
				return err
			}
			var final []string
			for i, st := range statuses {
				switch {
				case st.Final():
					final = append(final, part[i])
				case lookups > 0:
					lookups--
					r, err := s.cfg.Client.Get(ctx, part[i])
					if err != nil {
						return err
					}
					if r.Status.Final() {
						if err := s.emit(r, pending, forget, fn); err != nil {
							return err
						}
					}
				}
			}
			if len(final) == 0 {
				continue
			}
			rs, err := s.st.GetMany(ctx, final)
			if err != nil {
				return err
			}
			for _, id := range final {
				if r, ok := rs[id]; ok && r.Status.Final() {
					if err := s.emit(r, pending, forget, fn); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if err := read(ids, 0); err != nil {
		return err
	}
	recheck := time.NewTicker(waitEachRecheck)
	defer recheck.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case id := <-w.ids:
			group := []string{id}
			for more := true; more && len(group) < 1000; {
				select {
				case id := <-w.ids:
					group = append(group, id)
				default:
					more = false
				}
			}
			if err := read(group, 0); err != nil {
				return err
			}
		case <-w.ch:
			if w.lost.Swap(false) {
				if err := read(keys(pending), 0); err != nil {
					return err
				}
			}
		case <-recheck.C:
			if err := read(keys(pending), waitEachLookups); err != nil {
				return err
			}
		}
	}
	return nil
}

// emit passes final Result r to fn once.
func (s *Service) emit(r jobs.Result, pending map[string]bool, forget func(string), fn func(jobs.Result) error) error {
	if !pending[r.ID] {
		return nil
	}
	delete(pending, r.ID)
	forget(r.ID)
	return fn(r)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
