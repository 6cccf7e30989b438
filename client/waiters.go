package client

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// doneHub shares one pub/sub connection among a Client's Waits, where each
// Wait used to open (and close) one of its own: a TCP connection, its
// handshake and a subscription a job. A Wait joins its job's done channel:
// the first waiter of a channel subscribes to it, and the join returns once
// Redis has confirmed that subscription (so nothing published after the
// join is missed); the last one to leave unsubscribes. A channel is never
// unsubscribed before its subscription is confirmed, so a confirmation
// always answers the subscription it is taken for. Messages, and
// subscriptions confirmed again after go-redis reconnected (messages may
// have been missed), are events for every waiter of the channel.
type doneHub struct {
	pubSub func(context.Context) *redis.PubSub

	mu    sync.Mutex
	ps    *redis.PubSub
	gone  chan struct{} // closed when ps is closed
	chans map[string]*hubChan
}

type hubChan struct {
	confirmed chan struct{} // closed at Redis's confirmation
	waiters   map[*doneWaiter]struct{}
}

// doneWaiter is one Wait's place in the hub.
type doneWaiter struct {
	hub     *doneHub
	channel string
	// events has a value when the channel had a message (its payload)
	// or was subscribed again (""); gone is closed when the hub is
	// closed.
	events chan string
	gone   <-chan struct{}
}

// errHubClosed: the Client was closed while a Wait waited.
var errHubClosed = errors.New("subscription closed")

func newDoneHub(pubSub func(context.Context) *redis.PubSub) *doneHub {
	return &doneHub{pubSub: pubSub, chans: map[string]*hubChan{}}
}

// join subscribes to channel if no waiter has, and returns once Redis has
// confirmed the subscription.
func (h *doneHub) join(ctx context.Context, channel string) (*doneWaiter, error) {
	h.mu.Lock()
	if h.ps == nil {
		h.ps, h.gone = h.pubSub(context.WithoutCancel(ctx)), make(chan struct{})
		go h.run(h.ps, h.gone)
	}
	w := &doneWaiter{hub: h, channel: channel, events: make(chan string, 1), gone: h.gone}
	hc := h.chans[channel]
	if hc == nil {
		hc = &hubChan{confirmed: make(chan struct{}), waiters: map[*doneWaiter]struct{}{}}
		h.chans[channel] = hc
		// Under the lock, so that subscribes and unsubscribes of a
		// channel reach Redis in the order they were decided.
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			delete(h.chans, channel)
			_ = h.ps.Unsubscribe(context.WithoutCancel(ctx), channel)
			h.mu.Unlock()
			return nil, err
		}
	}
	hc.waiters[w] = struct{}{}
	h.mu.Unlock()
	select {
	case <-hc.confirmed:
		return w, nil
	case <-w.gone:
		w.leave()
		return nil, errHubClosed
	case <-ctx.Done():
		w.leave()
		return nil, context.Cause(ctx)
	}
}

// leave ends w's wait; the channel's last waiter unsubscribes from it, or
// leaves that to the confirmation still awaited.
func (w *doneWaiter) leave() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	hc := h.chans[w.channel]
	if hc == nil {
		return
	}
	delete(hc.waiters, w)
	if len(hc.waiters) > 0 {
		return
	}
	select {
	case <-hc.confirmed:
		delete(h.chans, w.channel)
		if h.ps != nil {
			_ = h.ps.Unsubscribe(context.Background(), w.channel)
		}
	default: // run unsubscribes when the confirmation comes
	}
}

// run hands ps's messages and confirmations to the waiters until ps is
// closed.
func (h *doneHub) run(ps *redis.PubSub, gone chan struct{}) {
	defer close(gone)
	for m := range ps.ChannelWithSubscriptions() {
		var channel, payload string
		confirm := false
		switch m := m.(type) {
		case *redis.Message:
			channel, payload = m.Channel, m.Payload
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			channel, confirm = m.Channel, true
		default:
			continue
		}
		h.mu.Lock()
		hc := h.chans[channel]
		switch {
		case hc == nil:
		case confirm && !isClosed(hc.confirmed):
			close(hc.confirmed)
			if len(hc.waiters) == 0 {
				delete(h.chans, channel)
				_ = ps.Unsubscribe(context.Background(), channel)
			}
		default:
			for w := range hc.waiters {
				select {
				case w.events <- payload:
				default: // one pending event covers this one (its waiter reads the Result)
				}
			}
		}
		h.mu.Unlock()
	}
}

// close closes the hub's connection; waiters see gone.
func (h *doneHub) close() {
	h.mu.Lock()
	ps := h.ps
	h.ps, h.chans = nil, map[string]*hubChan{}
	h.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
