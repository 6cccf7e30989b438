package redistest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Namespace is one test's private part of the shared Redis at
// SANDQ_REDIS_ADDR (default 127.0.0.1:6379): a random key prefix, also to
// be used as the asynq queue prefix. Its keys and queues are deleted when
// the test ends.
type Namespace struct {
	RDB    *redis.Client
	Addr   string
	Prefix string
}

// NewNamespace connects to the shared Redis, failing the test (never
// skipping it) when Redis does not answer; name goes into the prefix.
func NewNamespace(t testing.TB, name string) *Namespace {
	t.Helper()
	addr := cmp.Or(os.Getenv("SANDQ_REDIS_ADDR"), "127.0.0.1:6379")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("these tests need a real Redis at %s (set SANDQ_REDIS_ADDR to change it): %v", addr, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	n := &Namespace{RDB: rdb, Addr: addr, Prefix: "sandqtest-" + name + "-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() {
		n.cleanup(t)
		_ = rdb.Close()
	})
	return n
}

// cleanup deletes the namespace's asynq queues (force: pending tasks too)
// and its keys.
func (n *Namespace) cleanup(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp := asynq.NewInspectorFromRedisClient(n.RDB)
	if queues, err := insp.Queues(); err == nil {
		for _, q := range queues {
			if strings.HasPrefix(q, n.Prefix+":") {
				_ = insp.DeleteQueue(q, true)
			}
		}
	}
	if keys := n.Keys(t); len(keys) > 0 {
		if err := n.RDB.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup: del: %v", err)
		}
	}
}

// Keys lists the namespace's keys: its own and its asynq queues'.
func (n *Namespace) Keys(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for _, pattern := range []string{n.Prefix + ":*", "asynq:{" + n.Prefix + ":*"} {
		iter := n.RDB.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %s: %v", pattern, err)
		}
	}
	return keys
}
