package worker

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/artifacts"
)

// artifactSweeper is the worker's artifact retention loop: every interval
// (default artifacts.DefaultSweepInterval(ttl)) it deletes the artifacts
// under prefix stored more than ttl ago, and on S3 sets the bucket's
// lifecycle rule as a backstop. Its Run is the loop; every worker runs
// one, and two at once are harmless.
func artifactSweeper(st artifacts.Store, prefix string, ttl, interval time.Duration, log zerolog.Logger) *artifacts.Sweeper {
	return &artifacts.Sweeper{Store: st, Prefix: prefix, TTL: ttl, Interval: interval,
		Report: func(r artifacts.SweepReport) {
			if r.LifecycleErr != nil {
				log.Warn().Err(r.LifecycleErr).Msg("artifact bucket lifecycle rule not set; the sweeper alone enforces --artifact-ttl")
			}
			if r.Err != nil || r.Removed > 0 {
				log.Err(r.Err).Int("removed", r.Removed).Time("cutoff", r.Cutoff).Dur("took", r.Took).Msg("artifacts swept")
			}
		}}
}
