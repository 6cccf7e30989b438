package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A tenant's jobs not yet final are counted in a sorted set (score: enqueue
// time), so a cap holds over every API process. The set is pruned only
// when the cap is reached: then each member's status is read, and the
// final ones (and any older than a day) leave.

// ActiveJobs returns how many jobs tenant's set holds.
func (s *Store) ActiveJobs(ctx context.Context, tenant string) (int64, error) {
	return s.rdb.ZCard(ctx, s.tenantActiveKey(tenant)).Result()
}

// PruneActiveJobs drops from tenant's set the jobs that have ended (or
// whose Result is gone), and those added over a day ago, and returns how
// many remain.
func (s *Store) PruneActiveJobs(ctx context.Context, tenant string) (int64, error) {
	key := s.tenantActiveKey(tenant)
	if err := s.rdb.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(time.Now().Add(-24*time.Hour).UnixMilli(), 10)).Err(); err != nil {
		return 0, err
	}
	ids, err := s.rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	for len(ids) > 0 {
		group := ids[:min(len(ids), 1000)]
		ids = ids[len(group):]
		rs, err := s.GetMany(ctx, group)
		if err != nil {
			return 0, err
		}
		var done []any
		for _, id := range group {
			if r, ok := rs[id]; !ok || r.Status.Final() {
				done = append(done, id)
			}
		}
		if len(done) > 0 {
			if err := s.rdb.ZRem(ctx, key, done...).Err(); err != nil {
				return 0, err
			}
		}
	}
	return s.rdb.ZCard(ctx, key).Result()
}

// TrackActiveJobs adds jobs to tenant's set.
func (s *Store) TrackActiveJobs(ctx context.Context, tenant string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	now := float64(time.Now().UnixMilli())
	zs := make([]redis.Z, len(ids))
	for i, id := range ids {
		zs[i] = redis.Z{Score: now, Member: id}
	}
	key := s.tenantActiveKey(tenant)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, zs...)
		p.Expire(ctx, key, 48*time.Hour)
		return nil
	})
	return err
}

// Batch is a batch's record: its tenant, when it was made and its jobs'
// IDs, kept for the result TTL.
type Batch struct {
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
	IDs     []string  `json:"ids"`
}

// ErrNoBatch: no batch has that ID.
var ErrNoBatch = errors.New("store: no such batch")

// BatchExists reports whether batch id has a record.
func (s *Store) BatchExists(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.batchKey(id)).Result()
	return n > 0, err
}

// CreateBatch stores batch id's record unless one exists; it reports
// whether it wrote.
func (s *Store) CreateBatch(ctx context.Context, id string, b Batch) (bool, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return s.rdb.SetNX(ctx, s.batchKey(id), raw, s.ttl).Result()
}

// GetBatch reads batch id's record; ErrNoBatch when there is none.
func (s *Store) GetBatch(ctx context.Context, id string) (Batch, error) {
	var b Batch
	raw, err := s.rdb.Get(ctx, s.batchKey(id)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return b, ErrNoBatch
	case err != nil:
		return b, fmt.Errorf("store: read batch: %w", err)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, fmt.Errorf("store: read batch %s: %w", id, err)
	}
	return b, nil
}

// ActiveJobIDs lists the jobs of tenant's set.
func (s *Store) ActiveJobIDs(ctx context.Context, tenant string) ([]string, error) {
	return s.rdb.ZRange(ctx, s.tenantActiveKey(tenant), 0, -1).Result()
}
