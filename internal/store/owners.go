package store

import (
	"context"
	"fmt"
	"time"
)

// Heartbeat marks owner alive for ttl. A worker calls it well within ttl,
// again and again.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, OwnerKey(owner), time.Now().UTC().Format(time.RFC3339Nano), ttl).Err(); err != nil {
		return fmt.Errorf("store: heartbeat %s: %w", owner, err)
	}
	return nil
}

// OwnerAlive reports whether owner's heartbeat is current.
func (s *Store) OwnerAlive(ctx context.Context, owner string) (bool, error) {
	n, err := s.rdb.Exists(ctx, OwnerKey(owner)).Result()
	if err != nil {
		return false, fmt.Errorf("store: owner %s alive: %w", owner, err)
	}
	return n > 0, nil
}

// OwnerGone removes owner's heartbeat: it has stopped.
func (s *Store) OwnerGone(ctx context.Context, owner string) error {
	// One key a command: on a Cluster the two live in different slots.
	if err := s.rdb.Del(ctx, s.WorkerStatusKey(owner)).Err(); err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, OwnerKey(owner)).Err(); err != nil {
		return err
	}
	return s.SetFleetSlots(ctx, owner, 0) // its slots go with it
}
