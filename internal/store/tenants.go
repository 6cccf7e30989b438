package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// CreateBatch stores batch id's record unless one exists, and adds it to
// the recent-batches indexes; it reports whether it wrote.
func (s *Store) CreateBatch(ctx context.Context, id string, b Batch) (bool, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	set, err := s.rdb.SetNX(ctx, s.batchKey(id), raw, s.ttl).Result()
	if err != nil || !set {
		return set, err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		s.addRecent(ctx, p, "batches", id, b.Tenant, b.Created, RecentBatches, s.ttl)
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("store: index batch %s: %w", id, err)
	}
	return true, nil
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
