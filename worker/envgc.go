package worker

import (
	"cmp"
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// EnvCollector removes the environment images (built from recipes) of its
// namespace that no environment names any more (deleted, changed, or
// built on a language image since rebuilt) and those no job used for
// MaxAge. An image a container uses is not removed (the engine refuses);
// the next pass tries again. Last uses come from the store's build
// records (store.EnvBuild.LastUsed).
type EnvCollector struct {
	Images interface {
		envBuilder
		ImageID(ctx context.Context, image string) (string, error)
	}
	Store *store.Store
	// ImagePrefix names the language images the recipes are built on.
	ImagePrefix string
	// MaxAge removes an image unused this long. Default 7 days.
	MaxAge time.Duration
	Logger zerolog.Logger
}

// Collect removes what it should now and returns the removed images' hashes.
func (c *EnvCollector) Collect(ctx context.Context, now time.Time) ([]string, error) {
	images, err := c.Images.ListImages(ctx, map[string]string{sandbox.LabelNamespace: c.Store.Prefix()})
	if err != nil {
		return nil, err
	}
	envs, err := c.Store.Environments(ctx, "", true)
	if err != nil {
		return nil, err
	}
	builds, err := c.Store.EnvBuilds(ctx)
	if err != nil {
		return nil, err
	}
	// The hashes the environments build now.
	live := map[string]bool{}
	bases := map[string]string{}
	for _, e := range envs {
		l, ok := langs.Lookup(e.Recipe.Lang)
		if !ok {
			continue
		}
		img := l.Image(cmp.Or(c.ImagePrefix, langs.DefaultImagePrefix))
		id, seen := bases[img]
		if !seen {
			if id, err = c.Images.ImageID(ctx, img); err != nil {
				id = ""
			}
			bases[img] = id
		}
		if id != "" {
			live[e.Recipe.Hash(id)] = true
		}
	}
	maxAge := cmp.Or(c.MaxAge, 7*24*time.Hour)
	var removed []string
	for _, im := range images {
		hash := im.Labels[sandbox.LabelEnvHash]
		if hash == "" {
			continue
		}
		why := ""
		if !live[hash] {
			why = "no environment builds it"
		} else if b, ok := builds[hash]; ok && now.Sub(cmp.Or(b.LastUsed, b.Built)) > maxAge {
			why = "unused for " + maxAge.String()
		}
		if why == "" {
			continue
		}
		if err := c.Images.RemoveImage(ctx, im.ID); err != nil {
			c.Logger.Debug().Err(err).Str("hash", hash).Msg("environment image kept")
			continue
		}
		_ = c.Store.ForgetEnvBuild(ctx, hash)
		c.Logger.Info().Str("hash", hash).Str("why", why).Msg("environment image removed")
		removed = append(removed, hash)
	}
	return removed, nil
}

// Run collects every interval until ctx ends.
func (c *EnvCollector) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := c.Collect(ctx, time.Now()); err != nil && ctx.Err() == nil {
			c.Logger.Warn().Err(err).Msg("collect environment images")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
