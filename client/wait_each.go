package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandq/sandq/jobs"

	"github.com/redis/go-redis/v9"
)

// waitEachGroup is how many IDs WaitEach subscribes, reads or looks up in
// one round trip.
const waitEachGroup = 1000

// waitEachQueuedSample is how many awaited jobs whose stored Result says
// queued WaitEach looks up in asynq per re-read (see WaitEach).
const waitEachQueuedSample = 100

// WaitEach awaits the final Result of every job whose ID it receives from
// ids, and calls fn with each as it arrives: serially, once per ID (an ID
// received twice is awaited once), in the order the jobs finish. It
// returns nil once ids is closed and every ID received has had its
// Result; otherwise the first error: fn's, an ID that is not known
// (wrapping [ErrNotFound]), Redis failing, or ctx's cause when ctx ends.
// On an error, IDs received but not yet passed to fn are dropped: the
// caller keeps track of them to await them again.
//
// Unlike a Wait per job, it uses one pub/sub connection however many IDs
// it awaits, and a few commands per job: IDs are subscribed in groups as
// they arrive; once Redis confirms a subscription the stored Results are
// read (pipelined), so a Result stored in between is not missed; a
// published final status makes the Result be read (pipelined with the
// others ready); and a job's channel is unsubscribed when it is done. After a reconnect, go-redis
// subscribes again and every awaited Result is read again.
//
// Like Wait it re-reads the awaited jobs every 10 seconds, for a job that
// ended without a final Result being published (asynq archives a task
// whose worker died on its last attempt) and for a message go-redis
// dropped because fn was slow for a minute. It reads every stored Result
// (pipelined) and looks up asynq's task ([Client.Get]) for each job whose
// Result says running and for a sample of at most 100 of those still
// queued, so the cost stays bounded for very large batches.
func (c *Client) WaitEach(ctx context.Context, ids <-chan string, fn func(jobs.Result) error) error {
	ps := c.store.PubSub(ctx)
	defer ps.Close()
	w := &eachWaiter{c: c, ps: ps, fn: fn, awaited: map[string]bool{}, seen: map[string]bool{}}
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(waitEachGroup))
	recheck := time.NewTicker(c.waitRecheck)
	defer recheck.Stop()

	for ids != nil || len(w.awaited) > 0 {
		var err error
		select {
		case <-ctx.Done():
			return fmt.Errorf("client: wait: %w", context.Cause(ctx))
		case id, ok := <-ids:
			if !ok {
				ids = nil
				continue
			}
			group := []string{id}
			group, ids = drain(group, ids)
			err = w.add(ctx, group)
		case m, ok := <-msgs:
			if !ok {
				return errors.New("client: wait: subscription closed")
			}
			err = w.receive(ctx, m, msgs)
		case <-recheck.C:
			err = w.recheck(ctx)
		}
		if err == nil {
			err = w.unsubscribe(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// drain appends to group the IDs ids has ready, up to waitEachGroup in
// all, without blocking. It returns nil for ids once ids is closed.
func drain(group []string, ids <-chan string) ([]string, <-chan string) {
	for len(group) < waitEachGroup {
		select {
		case id, ok := <-ids:
			if !ok {
				return group, nil
			}
			group = append(group, id)
		default:
			return group, ids
		}
	}
	return group, ids
}

// eachWaiter is the state of one WaitEach.
type eachWaiter struct {
	c  *Client
	ps *redis.PubSub
	fn func(jobs.Result) error
	// awaited holds the IDs subscribed and not yet done; true once Redis
	// has confirmed the subscription.
	awaited map[string]bool
	// seen holds every ID received, to await each once.
	seen map[string]bool
	// unsub collects the channels of jobs done, unsubscribed in a group.
	unsub []string
}

// add subscribes to the done channels of the IDs of group not seen yet.
// Their Results are read when Redis confirms (receive).
func (w *eachWaiter) add(ctx context.Context, group []string) error {
	var channels []string
	for _, id := range group {
		if !jobs.ValidID(id) {
			return fmt.Errorf("client: wait %q: %w", id, jobs.ErrNotFound)
		}
		if w.seen[id] {
			continue
		}
		w.seen[id] = true
		w.awaited[id] = false
		channels = append(channels, w.c.store.DoneChannel(id))
	}
	if len(channels) == 0 {
		return nil
	}
	if err := w.ps.Subscribe(ctx, channels...); err != nil {
		return fmt.Errorf("client: wait: subscribe: %w", err)
	}
	return nil
}

// receive handles m and any further messages msgs has ready: the jobs
// whose final status was published, and those whose subscriptions were
// confirmed (first, or again after a reconnect), have their Results read
// (pipelined) and the final ones go to fn.
func (w *eachWaiter) receive(ctx context.Context, m any, msgs <-chan any) error {
	var confirmed []string
	for n := 1; ; n++ {
		switch m := m.(type) {
		case *redis.Subscription:
			id, _ := w.c.store.DoneID(m.Channel)
			if _, ok := w.awaited[id]; ok && m.Kind == "subscribe" {
				w.awaited[id] = true
				confirmed = append(confirmed, id)
			}
		case *redis.Message:
			// A small final Result comes whole in its notice; a
			// notice with the status alone has the Result read with
			// the others.
			id, _ := w.c.store.DoneID(m.Channel)
			if _, ok := w.awaited[id]; ok {
				if r, ok := w.c.store.NoticeResult(id, m.Payload); ok {
					if err := w.done(r); err != nil {
						return err
					}
				} else {
					confirmed = append(confirmed, id)
				}
			}
		}
		next, more := readyMessage(msgs)
		if !more || n == waitEachGroup {
			break
		}
		m = next
	}
	return w.read(ctx, confirmed, false)
}

// readyMessage returns the next message if msgs has one ready.
func readyMessage(msgs <-chan any) (any, bool) {
	select {
	case m, ok := <-msgs:
		return m, ok
	default:
		return nil, false
	}
}

// recheck reads every awaited job again; see WaitEach.
func (w *eachWaiter) recheck(ctx context.Context) error {
	ids := make([]string, 0, len(w.awaited))
	for id := range w.awaited {
		ids = append(ids, id)
	}
	return w.read(ctx, ids, true)
}

// read reads the stored Results of ids, in groups, and passes the final
// ones to fn. A job without a stored Result is looked up with Get, which
// knows asynq's view (and returns ErrNotFound for an unknown ID); with
// lookup, so is each job whose Result says running and a sample of
// those queued.
func (w *eachWaiter) read(ctx context.Context, ids []string, lookup bool) error {
	queuedLookups := 0
	for len(ids) > 0 {
		group := ids[:min(len(ids), waitEachGroup)]
		ids = ids[len(group):]
		stored, err := w.c.store.GetMany(ctx, group)
		if err != nil {
			return fmt.Errorf("client: wait: %w", err)
		}
		for _, id := range group {
			if _, ok := w.awaited[id]; !ok {
				continue // done meanwhile
			}
			r, found := stored[id]
			switch {
			case found && r.Status.Final():
			case !found,
				lookup && r.Status == jobs.StatusRunning,
				lookup && r.Status == jobs.StatusQueued && queuedLookups < waitEachQueuedSample:
				if found && r.Status == jobs.StatusQueued {
					queuedLookups++
				}
				if r, err = w.c.Get(ctx, id); err != nil {
					return fmt.Errorf("client: wait %s: %w", id, err)
				}
			}
			if r.Status.Final() {
				if err := w.done(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// done passes r to fn and marks its job done.
func (w *eachWaiter) done(r jobs.Result) error {
	if _, ok := w.awaited[r.ID]; !ok {
		return nil
	}
	delete(w.awaited, r.ID)
	w.unsub = append(w.unsub, w.c.store.DoneChannel(r.ID))
	return w.fn(r)
}

// unsubscribe unsubscribes the channels of the jobs done.
func (w *eachWaiter) unsubscribe(ctx context.Context) error {
	for len(w.unsub) > 0 {
		group := w.unsub[:min(len(w.unsub), waitEachGroup)]
		if err := w.ps.Unsubscribe(ctx, group...); err != nil {
			return fmt.Errorf("client: wait: unsubscribe: %w", err)
		}
		w.unsub = w.unsub[len(group):]
	}
	w.unsub = nil
	return nil
}
