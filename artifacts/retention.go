package artifacts

import (
	"context"
	"errors"
	"time"
)

// Retention: artifacts live for a TTL (by default the result TTL: a job's
// artifacts go when its result does). A Sweeper in every worker deletes
// what is older; on S3 a bucket lifecycle rule is the backstop when no
// worker runs.

// sweepBatch is how many keys one Delete gets (S3 DeleteObjects' limit).
const sweepBatch = 1000

// Sweep deletes every object under dir ("dir/..."; "" is the whole store)
// stored before cutoff and returns how many it deleted. The local store
// also removes Put's temporary files older than cutoff and the directories
// left empty. Objects stored at or after cutoff stay, as does everything
// outside dir.
func Sweep(ctx context.Context, s Store, dir string, cutoff time.Time) (removed int, err error) {
	if l, ok := s.(interface {
		sweep(context.Context, string, time.Time) (int, error)
	}); ok {
		return l.sweep(ctx, dir, cutoff)
	}
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.Delete(ctx, batch...)
		if err == nil {
			removed += len(batch)
		}
		batch = batch[:0]
		return err
	}
	err = s.List(ctx, dir, func(o Object) error {
		if !o.ModTime.Before(cutoff) {
			return nil
		}
		if batch = append(batch, o.Key); len(batch) == sweepBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return removed, err
}

// Sweeper enforces the retention of the artifacts under Prefix for a
// long-running process: Run sweeps at once and then every Interval. Every
// worker may run one on the same store; their sweeps overlap harmlessly.
type Sweeper struct {
	// Store holds the artifacts.
	Store Store
	// Prefix is the artifact prefix: objects under "Prefix/" are swept
	// ("" sweeps the whole store, input files by key included).
	Prefix string
	// TTL is how long an object is kept after it was stored. Required.
	TTL time.Duration
	// Interval is the time between sweeps. Default DefaultSweepInterval(TTL).
	Interval time.Duration
	// Report, if set, is called with the outcome of every sweep Run makes.
	Report func(SweepReport)
}

// SweepReport is the outcome of one sweep.
type SweepReport struct {
	// Cutoff: objects stored before it were deleted.
	Cutoff time.Time
	// Removed is how many objects were deleted.
	Removed int
	// Took is how long the sweep took.
	Took time.Duration
	// Err is why the sweep failed or stopped early (what it deleted
	// before is counted in Removed).
	Err error
	// LifecycleErr, set by Run, is why the bucket lifecycle rule (the
	// backstop on S3, see S3.SetExpiration) could not be set. Run tries
	// again before its next sweeps until the service answers, so a
	// service that refuses lifecycle rules is reported once; the sweeps
	// go on regardless.
	LifecycleErr error
}

// DefaultSweepInterval is the time between sweeps for ttl: a quarter of
// it, at most 10 minutes, at least a millisecond.
func DefaultSweepInterval(ttl time.Duration) time.Duration {
	return max(min(ttl/4, 10*time.Minute), time.Millisecond)
}

func (s *Sweeper) interval() time.Duration {
	if s.Interval > 0 {
		return s.Interval
	}
	return DefaultSweepInterval(s.TTL)
}

// SweepOnce deletes the objects under Prefix stored before now - TTL.
func (s *Sweeper) SweepOnce(ctx context.Context, now time.Time) SweepReport {
	r := SweepReport{Cutoff: now.Add(-s.TTL)}
	if s.TTL <= 0 {
		r.Err = errors.New("artifacts: Sweeper.TTL must be positive")
		return r
	}
	start := time.Now()
	r.Removed, r.Err = Sweep(ctx, s.Store, s.Prefix, r.Cutoff)
	r.Took = time.Since(start)
	return r
}

// SetLifecycle sets the bucket lifecycle rule that expires the objects
// under Prefix after TTL rounded up to days, when the store is S3 and TTL
// is at least a day (see S3.SetExpiration); else it does nothing.
func (s *Sweeper) SetLifecycle(ctx context.Context) error {
	if e, ok := s.Store.(interface {
		SetExpiration(context.Context, string, time.Duration) error
	}); ok {
		return e.SetExpiration(ctx, s.Prefix, s.TTL)
	}
	return nil
}

// Run sweeps at once and then every Interval until ctx ends, passing each
// outcome to Report. Before a sweep it sets the bucket lifecycle rule
// (SetLifecycle) until that has succeeded or the service has refused it.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	lifecycleDone := false
	for {
		var lerr error
		if !lifecycleDone {
			lerr = s.SetLifecycle(ctx)
			// A refusal (an S3 error response) is final; a service that
			// did not answer is asked again next time.
			lifecycleDone = lerr == nil || s3Code(lerr) != ""
		}
		r := s.SweepOnce(ctx, time.Now())
		r.LifecycleErr = lerr
		if ctx.Err() != nil {
			return
		}
		if s.Report != nil {
			s.Report(r)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
