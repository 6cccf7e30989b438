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
