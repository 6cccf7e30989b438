package worker

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// Tenants' lanes (see the store's ledger): every worker says how many job
// slots it has, so producers hold a tenant's jobs past its fair share of
// the fleet, and sweeps the lanes each second: it releases what a
// tenant's share allows now (a tenant left, a share grew) and enqueues
// again what a releaser that died left between its lane and asynq. The
// worker that ends a tenant's job releases that tenant's next ones at
// once (Handler, Config.Lanes).

// lanesEvery is how often a worker sweeps the lanes and renews its slots.
const lanesEvery = time.Second

// staleRelease is how long a job may sit between its lane and asynq
// before a sweep enqueues it again.
const staleRelease = 30 * time.Second

// laneSweeper is the lanes' loop.
type laneSweeper struct {
	fleet interface {
		SetFleetSlots(ctx context.Context, owner string, slots int) error
	}
	lanes interface {
		SweepLanes(ctx context.Context, stale time.Duration) (int, error)
	}
	owner string
	slots int
	every time.Duration
	log   zerolog.Logger
}

// run renews the worker's slots and sweeps the lanes every lanesEvery
// until ctx ends, and then says the worker has no slots.
func (l *laneSweeper) run(ctx context.Context) {
	every := l.every
	if every <= 0 {
		every = lanesEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.fleet.SetFleetSlots(cctx, l.owner, 0)
	}()
	for {
		if err := l.fleet.SetFleetSlots(ctx, l.owner, l.slots); err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("fleet slots")
		}
		if n, err := l.lanes.SweepLanes(ctx, staleRelease); err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Int("released", n).Msg("sweep the tenants' lanes")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
