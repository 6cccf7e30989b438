package worker

import (
	"cmp"
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/internal/store"
)

// heartbeatTTL is how long a worker's heartbeat says it is alive; it is
// renewed every third of that.
const heartbeatTTL = 30 * time.Second

// ownerStore is what the Server needs of the store for its owner
// heartbeat: the key every reconciler on the engine reads
// (sandbox.PoolConfig.Alive) before it removes another owner's
// containers.
type ownerStore interface {
	Heartbeat(ctx context.Context, owner string, ttl time.Duration) error
	OwnerGone(ctx context.Context, owner string) error
	PublishWorkerStatus(ctx context.Context, owner string, st store.WorkerStatus, ttl time.Duration) error
}

var _ ownerStore = (*store.Store)(nil)

// heartbeat keeps an owner's heartbeat current. The Server stores the
// first beat before it makes any container; the loop renews it.
type heartbeat struct {
	owners ownerStore
	owner  string
	// ttl is each beat's lifetime. Default heartbeatTTL.
	ttl time.Duration
	// ticks, if set, replaces the ticker of ttl/3 (tests drive the loop).
	ticks <-chan time.Time
	// status, if set, is published with each renewal (the dashboard's
	// workers page), for as long as the beat.
	status func() store.WorkerStatus
	log    zerolog.Logger

	renewed testSignal[error] // after each renewal, with its error
}

// beat stores one heartbeat.
func (h *heartbeat) beat(ctx context.Context) error {
	ttl := cmp.Or(h.ttl, heartbeatTTL)
	if err := h.owners.Heartbeat(ctx, h.owner, ttl); err != nil {
		return err
	}
	if h.status == nil {
		return nil
	}
	st := h.status()
	st.At = time.Now().UTC()
	return h.owners.PublishWorkerStatus(ctx, h.owner, st, ttl)
}

// run renews the heartbeat every third of its TTL until ctx ends. A
// failed renewal is logged; the next tick tries again.
func (h *heartbeat) run(ctx context.Context) {
	ticks := h.ticks
	if ticks == nil {
		t := time.NewTicker(cmp.Or(h.ttl, heartbeatTTL) / 3)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			err := h.beat(ctx)
			if err != nil && ctx.Err() == nil {
				h.log.Warn().Err(err).Msg("heartbeat")
			}
			h.renewed.signal(err)
		}
	}
}
