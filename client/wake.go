package client

import (
	"context"
	"slices"
	"sync"
	"time"
)

// waker publishes the store's wakes (idle workers try a queue now:
// store.DequeueGate) after tasks reach asynq, off the enqueue's path and
// coalesced: the queues asked for while wakes are being published are
// published together next, once each, so every task enqueued before a
// wake was asked for is covered by a wake published after it. A lost wake
// costs a worker's fallback poll (--poll-interval), never the job.
type waker struct {
	publish func(ctx context.Context, queues ...string) error

	once    sync.Once
	mu      sync.Mutex
	pending []string      // queues to wake next
	kick    chan struct{} // pending is not empty
	stop    chan struct{}
	done    chan struct{}
}

// wakeTimeout bounds one wake's publish.
const wakeTimeout = time.Second

func newWaker(publish func(ctx context.Context, queues ...string) error) *waker {
	return &waker{publish: publish, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// wake asks for a wake of asynq queue q after what was enqueued so far.
func (w *waker) wake(q string) {
	w.once.Do(func() { go w.run() })
	w.mu.Lock()
	if !slices.Contains(w.pending, q) {
		w.pending = append(w.pending, q)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default: // a kick is pending: it covers this task too
	}
}

func (w *waker) run() {
	defer close(w.done)
	for {
		select {
		case <-w.kick:
			w.send()
		case <-w.stop:
			// Flush: a process that enqueues and exits still wakes.
			select {
			case <-w.kick:
				w.send()
			default:
			}
			return
		}
	}
}

func (w *waker) send() {
	w.mu.Lock()
	queues := w.pending
	w.pending = nil
	w.mu.Unlock()
	if len(queues) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_ = w.publish(ctx, queues...) // lost: the workers' fallback poll finds the tasks
}

// close publishes a pending wake and stops; wake must not be called after.
func (w *waker) close() {
	if w == nil {
		return
	}
	started := true
	w.once.Do(func() { started = false })
	if !started {
		return
	}
	close(w.stop)
	<-w.done
}
