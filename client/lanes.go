package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Tenants' lanes (see the store's ledger): a job held in its tenant's lane
// is enqueued in asynq by whoever releases it: the worker that stores the
// final Result of one of the tenant's jobs (Release), and every worker's
// sweep (SweepLanes), which also re-enqueues what a releaser that died
// left half done.

// fleetSlotsEvery is how often a client reads the workers' slots again.
const fleetSlotsEvery = 2 * time.Second

// fleetCache is the workers' slots as last read, and when.
type fleetCache struct {
	slots atomic.Int64
	at    atomic.Int64 // unix nanoseconds
}

// fleetSlots is the workers' job slots, read at most every fleetSlotsEvery;
// 0 (nothing held) when they cannot be read.
func (c *Client) fleetSlots(ctx context.Context) int {
	now := time.Now().UnixNano()
	if now-c.fleet.at.Load() < int64(fleetSlotsEvery) {
		return int(c.fleet.slots.Load())
	}
	n, err := c.store.FleetSlots(ctx)
	if err != nil {
		return int(c.fleet.slots.Load())
	}
	c.fleet.slots.Store(int64(n))
	c.fleet.at.Store(now)
	return n
}

// Release enqueues tenant's held jobs up to its cap, and returns how many.
func (c *Client) Release(ctx context.Context, tenant string) (int, error) {
	held, err := c.store.Release(ctx, tenant, c.fleetSlots(ctx))
	if err != nil {
		return 0, err
	}
	return c.enqueueHeld(ctx, held)
}

// enqueueHeld enqueues released jobs in asynq and records them released.
func (c *Client) enqueueHeld(ctx context.Context, held []store.Held) (int, error) {
	var done []string
	var errs []error
	for _, h := range held {
		j, err := jobs.DecodeJob(h.Payload)
		if err != nil {
			// Never: the payload is our own encoding of a valid job.
			errs = append(errs, fmt.Errorf("client: release %s: %w", h.ID, err))
			done = append(done, h.ID)
			continue
		}
		if _, err := c.enqueueTask(ctx, j); err != nil {
			errs = append(errs, fmt.Errorf("client: release %s: %w", h.ID, err))
			continue // left releasing: the sweep enqueues it again
		}
		done = append(done, h.ID)
	}
	if err := c.store.Released(ctx, done...); err != nil {
		errs = append(errs, err)
	}
	return len(done), errors.Join(errs...)
}

// SweepLanes releases what every tenant's lanes may release now, and
// enqueues again the jobs released over stale ago whose releaser did not
// record them released. Workers run it every second.
func (c *Client) SweepLanes(ctx context.Context, stale time.Duration) (int, error) {
	tenants, err := c.store.LaneTenants(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, t := range tenants {
		n, err := c.Release(ctx, t)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	again, err := c.store.StaleReleases(ctx, stale)
	if err != nil {
		errs = append(errs, err)
	}
	n, err := c.enqueueHeld(ctx, again)
	total += n
	if err != nil {
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}
