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
// has used for MaxAge, then the least recently used ones until the sets
// together take at most MaxBytes. It manages the sets of its namespace
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
	// MaxAge removes a set unused this long. Default 7 days.
	MaxAge time.Duration
	// Forget is told of each removed volume (sandbox.Pool.ForgetLibs).
	Forget func(volume string)
	Logger zerolog.Logger
}

// LibsSet is one installed set as the collector sees it.
type LibsSet struct {
	Volume   string    `json:"volume"`
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
		sets = append(sets, LibsSet{Volume: v.Name, Bytes: u.Bytes, LastUsed: cmp.Or(u.LastUsed, v.Created)})
	}
	slices.SortFunc(sets, func(a, b LibsSet) int { return a.LastUsed.Compare(b.LastUsed) })
	return sets, nil
}

// Collect removes what is past the bounds at now, and returns the volumes
// removed.
func (c *LibsCollector) Collect(ctx context.Context, now time.Time) ([]string, error) {
	maxBytes := cmp.Or(c.MaxBytes, 10<<30)
	maxAge := cmp.Or(c.MaxAge, 7*24*time.Hour)
	sets, err := c.Sets(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	remove := func(s LibsSet, why string) bool {
		if err := c.Remove(ctx, s.Volume); err != nil {
			c.Logger.Debug().Err(err).Str("volume", s.Volume).Msg("library set kept")
			return false
		}
		removed = append(removed, s.Volume)
		c.Logger.Info().Str("volume", s.Volume).Int64("bytes", s.Bytes).Time("last_used", s.LastUsed).Str("why", why).Msg("library set removed")
		return true
	}
	// Age: every set unused for maxAge.
	var kept []LibsSet
	for _, s := range sets {
		if now.Sub(s.LastUsed) > maxAge && remove(s, "unused past --libs-max-age") {
			continue
		}
		kept = append(kept, s)
	}
	// Size: the least recently used first, until the rest fits.
	var total int64
	for _, s := range kept {
		total += s.Bytes
	}
	for _, s := range kept {
		if total <= maxBytes {
			break
		}
		if s.Bytes > 0 && remove(s, "over --libs-max-total-mb") {
			total -= s.Bytes
		}
	}
	return removed, nil
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
