package jobs

import (
	"cmp"
	"context"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisAddr is the Redis the tests run against: SANDQ_REDIS_ADDR, default
// 127.0.0.1:6379. The tests need it and fail, not skip, without it.
func redisAddr() string { return cmp.Or(os.Getenv("SANDQ_REDIS_ADDR"), "127.0.0.1:6379") }

// testRedis returns a client to the test Redis, closed at cleanup. It
// fails the test at once if Redis does not answer.
func testRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("jobs tests need a real Redis at %s (set SANDQ_REDIS_ADDR to change it): %v", redisAddr(), err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// testNamespace is one test's private corner of the shared Redis: its own
// key prefix and asynq queue prefix, both removed at cleanup.
type testNamespace struct {
	Prefix      string
	QueuePrefix string
}

func newTestNamespace(t testing.TB, rdb redis.UniversalClient) testNamespace {
	t.Helper()
	ns := testNamespace{Prefix: "sandqtest-" + NewID()[:16]}
	ns.QueuePrefix = ns.Prefix
	t.Cleanup(func() { cleanupNamespace(t, rdb, ns) })
	return ns
}

// cleanupNamespace deletes every key under the namespace's prefix and its
// asynq queues (force: pending tasks go too).
func cleanupNamespace(t testing.TB, rdb redis.UniversalClient, ns testNamespace) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, q := range Queues() {
		// ErrQueueNotFound is fine: the test never used that queue.
		_ = insp.DeleteQueue(AsynqQueue(ns.QueuePrefix, q), true)
	}
	// Our keys, and the per-queue statistics asynq keeps after
	// DeleteQueue.
	for _, pattern := range []string{ns.Prefix + ":*", "asynq:{" + ns.QueuePrefix + ":*"} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleanup: scan %s: %v", pattern, err)
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup: del: %v", err)
			}
		}
	}
}

// clientBundle is a Client on its own namespace of the test Redis, with
// asynq's inspector and client on the same Redis.
type clientBundle struct {
	client    *Client
	rdb       *redis.Client
	ns        testNamespace
	inspector *asynq.Inspector
	asynq     *asynq.Client
}

func newClientBundle(t *testing.T) *clientBundle {
	t.Helper()
	rdb := testRedis(t)
	ns := newTestNamespace(t, rdb)
	client, err := NewClient(Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.QueuePrefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	return &clientBundle{
		client:    client,
		rdb:       rdb,
		ns:        ns,
		inspector: asynq.NewInspectorFromRedisClient(rdb),
		asynq:     asynq.NewClientFromRedisClient(rdb),
	}
}
