package worker

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sandq/sandq/internal/store"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/sandbox"
)

// Volumes is what the collector needs of an engine.
type Volumes interface {
	ListVolumes(ctx context.Context, labels map[string]string) ([]sandbox.VolumeInfo, error)
	RemoveVolume(ctx context.Context, name string, force bool) error
}

// LibsCollector removes installed library sets (their volumes) that no job
// has used for MaxAge, then each tenant's least recently used ones until
// the tenant's sets take at most MaxTenantBytes, then the least recently
// used of all until the sets together take at most MaxBytes (less what a
// tenant past its quota still holds in use: that waits for the tenant's
// own sets to come free, it does not evict another's). A tenant
// installing set after set so evicts its own sets first: past its quota
// (TrimTenant runs after each of its installs), not another tenant's. It manages the sets of its namespace
// (the volumes labelled sandq.namespace=<Store's prefix>, made by its
// namespace's workers), never another's, and never removes a set a
// container uses this moment (the engine refuses; a worker that finds a
// set gone under it installs it again, see sandbox.ErrLibsGone). Sizes and
// last uses come from the store (store.Store.UseLibs, recorded by every
// worker of the namespace); a set with no record counts its age from its
// volume's creation and, its size unknown, is removed for age only.
type LibsCollector struct {
	Volumes Volumes
	Store   *store.Store
	// MaxBytes bounds the sets' total size. Default 10 GiB.
	MaxBytes int64
	// MaxTenantBytes bounds one tenant's sets' total size. Default 4 GiB.
	MaxTenantBytes int64
	// MaxAge removes a set unused this long. Default 7 days.
	MaxAge time.Duration
	// Forget is told of each removed volume (sandbox.Pool.ForgetLibs).
	Forget func(volume string)
	Logger zerolog.Logger
}

// LibsSet is one installed set as the collector sees it.
type LibsSet struct {
	Volume   string    `json:"volume"`
	Tenant   string    `json:"tenant,omitempty"`
	Bytes    int64     `json:"bytes"`
	LastUsed time.Time `json:"last_used"`
}

// Sets lists the installed sets on the engine, least recently used first.
func (c *LibsCollector) Sets(ctx context.Context) ([]LibsSet, error) {
	vols, err := c.Volumes.ListVolumes(ctx, map[string]string{sandbox.LabelManaged: "true", sandbox.LabelNamespace: c.Store.Prefix()})
	if err != nil {
		return nil, err
	}
	uses, err := c.Store.LibsUses(ctx)
	if err != nil {
		return nil, err
	}
	var sets []LibsSet
	for _, v := range vols {
		if _, ok := v.Labels[sandbox.LabelLibs]; !ok {
			continue
		}
		u := uses[v.Name]
		sets = append(sets, LibsSet{Volume: v.Name, Tenant: u.Tenant, Bytes: u.Bytes, LastUsed: cmp.Or(u.LastUsed, v.Created)})
	}
	slices.SortFunc(sets, func(a, b LibsSet) int { return a.LastUsed.Compare(b.LastUsed) })
	return sets, nil
}

// Collect removes what is past the bounds at now, and returns the volumes
// removed.
func (c *LibsCollector) Collect(ctx context.Context, now time.Time) ([]string, error) {
	maxAge := cmp.Or(c.MaxAge, 7*24*time.Hour)
	sets, err := c.Sets(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	// Age: every set unused for maxAge.
	var kept []LibsSet
	for _, s := range sets {
		if now.Sub(s.LastUsed) > maxAge && c.remove(ctx, s, "unused past --libs-max-age") {
			removed = append(removed, s.Volume)
			continue
		}
		kept = append(kept, s)
	}
	// Size: each tenant's within its quota, then all within the total.
	byTenant := map[string][]LibsSet{}
	for _, s := range kept {
		if s.Tenant != "" {
			byTenant[s.Tenant] = append(byTenant[s.Tenant], s)
		}
	}
	quota := cmp.Or(c.MaxTenantBytes, 4<<30)
	gone := map[string]bool{}
	// held is what tenants still hold past their quota after their trim:
	// sets a container uses this moment, removed on a later pass. The
	// total bound does not make the others pay for it (a tenant over its
	// quota would otherwise evict a quiet tenant's set by keeping its own
	// busy).
	var held int64
	for _, own := range byTenant {
		for _, v := range c.trim(ctx, own, quota, "", "over --libs-max-tenant-mb") {
			gone[v] = true
			removed = append(removed, v)
		}
		var left int64
		for _, s := range own {
			if !gone[s.Volume] {
				left += s.Bytes
			}
		}
		held += max(0, left-quota)
	}
	kept = slices.DeleteFunc(kept, func(s LibsSet) bool { return gone[s.Volume] })
	removed = append(removed, c.trim(ctx, kept, cmp.Or(c.MaxBytes, 10<<30)+held, "", "over --libs-max-total-mb")...)
	return removed, nil
}

// TrimTenant removes tenant's least recently used sets, but keep (the set
// just installed), until its sets take at most MaxTenantBytes, and returns
// the volumes removed.
func (c *LibsCollector) TrimTenant(ctx context.Context, tenant, keep string) ([]string, error) {
	sets, err := c.Sets(ctx)
	if err != nil {
		return nil, err
	}
	own := slices.DeleteFunc(sets, func(s LibsSet) bool { return s.Tenant != tenant })
	return c.trim(ctx, own, cmp.Or(c.MaxTenantBytes, 4<<30), keep, "over --libs-max-tenant-mb"), nil
}

// trim removes sets (least recently used first), but keep, until the
// rest take at most limit; it returns the volumes removed. A set in use
// stays, and one of unknown size is not removed for size.
func (c *LibsCollector) trim(ctx context.Context, sets []LibsSet, limit int64, keep, why string) []string {
	var total int64
	for _, s := range sets {
		total += s.Bytes
	}
	var removed []string
	for _, s := range sets {
		if total <= limit {
			break
		}
		if s.Bytes > 0 && s.Volume != keep && c.remove(ctx, s, why) {
			total -= s.Bytes
			removed = append(removed, s.Volume)
		}
	}
	return removed
}

// remove removes one set, logging why, and reports whether it went.
func (c *LibsCollector) remove(ctx context.Context, s LibsSet, why string) bool {
	if err := c.Remove(ctx, s.Volume); err != nil {
		c.Logger.Debug().Err(err).Str("volume", s.Volume).Msg("library set kept")
		return false
	}
	c.Logger.Info().Str("volume", s.Volume).Str("tenant", s.Tenant).Int64("bytes", s.Bytes).Time("last_used", s.LastUsed).Str("why", why).Msg("library set removed")
	return true
}

// Remove removes one set's volume unless a container uses it, and forgets
// it.
func (c *LibsCollector) Remove(ctx context.Context, volume string) error {
	if err := c.Volumes.RemoveVolume(ctx, volume, false); err != nil {
		return err
	}
	_ = c.Store.ForgetLibs(ctx, volume)
	if c.Forget != nil {
		c.Forget(volume)
	}
	return nil
}

// Run collects every interval until ctx ends.
func (c *LibsCollector) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := c.Collect(ctx, time.Now()); err != nil && ctx.Err() == nil {
			c.Logger.Warn().Err(err).Msg("collect library sets")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
