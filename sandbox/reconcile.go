package sandbox

import (
	"context"
	"time"
)

// Reconcile removes sandq containers that no live owner holds, and returns
// the IDs it removed.
//
// How ownership is known without a shared registry: every container's agent
// reads its stdin from the owner's attach connection, and the engine closes
// that stdin when the connection drops (StdinOnce). An owner that dies, even
// by SIGKILL, therefore takes its agents down with it: their containers stop
// running. So a container of another owner that is not running, and was
// created more than grace ago, has no live owner. A running container is
// never touched: its owner is alive. The grace period protects containers
// that a live owner has created but not yet started. The caller's own
// containers (owner self) are never touched.
//
// alive, when set, is a registry of live owners (the workers' heartbeats
// in Redis): a container of an owner it reports alive is never touched,
// whatever its state and age, and an error from it counts as alive.
func Reconcile(ctx context.Context, rt Runtime, self string, grace time.Duration, alive func(ctx context.Context, owner string) (bool, error)) ([]string, error) {
	cs, err := rt.List(ctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return nil, err
	}
	var removed []string
	cutoff := time.Now().Add(-grace)
	for _, c := range cs {
		owner := c.Labels[LabelOwner]
		if owner == self || c.State == "running" || c.Created.After(cutoff) {
			continue
		}
		if alive != nil {
			if ok, err := alive(ctx, owner); ok || err != nil {
				continue
			}
		}
		if err := rt.Remove(ctx, c.ID); err != nil {
			return removed, err
		}
		removed = append(removed, c.ID)
	}
	return removed, nil
}

// Reconcile runs Reconcile for this pool's owner and grace.
func (p *Pool) Reconcile(ctx context.Context) ([]string, error) {
	return Reconcile(ctx, p.cfg.Runtime, p.cfg.Owner, p.cfg.ReconcileGrace, p.cfg.Alive)
}

func (p *Pool) reconcileLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		removed, err := p.Reconcile(ctx)
		cancel()
		if err != nil && p.ctx.Err() == nil {
			p.log.Error().Err(err).Msg("reconcile")
		} else if len(removed) > 0 {
			p.log.Info().Int("removed", len(removed)).Msg("reconcile: removed containers of dead owners")
		}
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
	}
}
