package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// hub is the process's one Redis subscription for every request that
// waits for a job: it pattern-subscribes to the done channels once, and
// wakes the requests waiting for each job that ends. Thousands of
// long-polls hold one Redis connection, not thousands. After a reconnect it
// wakes every waiter, since a message may have been missed.
type hub struct {
	st     *store.Store
	log    zerolog.Logger
	onDone func(id string) // every job that ends (the webhook dispatcher)

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
	ready   chan struct{}
	once    sync.Once
}

// waiter is one request's interest: in one job (ch gets a value when it
// may have ended, and notice holds the last done message's payload: a
// small final Result travels in it, store.NoticeResult), or in many (ids
// gets each job that may have ended; when ids is full, lost is set and ch
// gets a value: read them all).
type waiter struct {
	ch     chan struct{}
	ids    chan string
	lost   atomic.Bool
	notice atomic.Pointer[string]
}

// notify tells w that job id may have ended, with the done message's
// payload ("" after a reconnect).
func (w *waiter) notify(id, payload string) {
	if w.ids == nil && payload != "" {
		w.notice.Store(&payload)
	}
	if w.ids != nil {
		select {
		case w.ids <- id:
			return
		default:
			w.lost.Store(true)
		}
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func newHub(st *store.Store, log zerolog.Logger) *hub {
	return &hub{st: st, log: log, waiters: map[string]map[*waiter]struct{}{}, ready: make(chan struct{})}
}

// run subscribes and dispatches until ctx ends.
func (h *hub) run(ctx context.Context) {
	ps := h.st.SubscribeAllDone(ctx)
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(4096), redis.WithChannelHealthCheckInterval(10*time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				// Subscribed, or again after a reconnect: anything
				// published meanwhile was missed.
				h.once.Do(func() { close(h.ready) })
				h.wakeAll()
			case *redis.Message:
				id, ok := h.st.DoneID(m.Channel)
				if !ok {
					continue
				}
				h.wake(id, m.Payload)
				if h.onDone != nil {
					h.onDone(id)
				}
			}
		}
	}
}

// waitReady waits until the subscription is confirmed.
func (h *hub) waitReady(ctx context.Context) error {
	select {
	case <-h.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// watch registers interest in job id; w.ch gets a value whenever the job
// may have ended (noticed may then have its Result). Call stop when done.
func (h *hub) watch(id string) (w *waiter, stop func()) {
	w = &waiter{ch: make(chan struct{}, 1)}
	h.add(w, id)
	return w, func() { h.remove(w, id) }
}

// noticed returns job id's final Result if the last done message w was
// told of carried it.
func (h *hub) noticed(w *waiter, id string) (jobs.Result, bool) {
	p := w.notice.Load()
	if p == nil {
		return jobs.Result{}, false
	}
	return h.st.NoticeResult(id, *p)
}

// watchMany registers interest in many jobs: see waiter. Call forget for
// each job done, and stop at the end.
func (h *hub) watchMany(ids []string) (w *waiter, forget func(id string), stop func()) {
	w = &waiter{ch: make(chan struct{}, 1), ids: make(chan string, 1024)}
	h.add(w, ids...)
	var mu sync.Mutex
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	forget = func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if left[id] {
			delete(left, id)
			h.remove(w, id)
		}
	}
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		for id := range left {
			h.remove(w, id)
		}
		clear(left)
	}
	return w, forget, stop
}

func (h *hub) add(w *waiter, ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.waiters[id] == nil {
			h.waiters[id] = map[*waiter]struct{}{}
		}
		h.waiters[id][w] = struct{}{}
	}
}

func (h *hub) remove(w *waiter, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters[id], w)
	if len(h.waiters[id]) == 0 {
		delete(h.waiters, id)
	}
}

func (h *hub) wake(id, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[id] {
		w.notify(id, payload)
	}
}

// wakeAll wakes every waiter after a reconnect: any end may have been
// missed.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.waiters {
		for w := range ws {
			if w.ids != nil {
				w.lost.Store(true)
			}
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// waiting counts the requests waiting now.
func (h *hub) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[*waiter]bool{}
	for _, ws := range h.waiters {
		for w := range ws {
			seen[w] = true
		}
	}
	return len(seen)
}
