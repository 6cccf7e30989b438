package client

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/redistest"
)

// clientBundle is a Client on its own namespace of the test Redis, with
// asynq's inspector and client on the same Redis.
type clientBundle struct {
	client    *Client
	rdb       *redis.Client
	ns        *redistest.Namespace
	inspector *asynq.Inspector
	asynq     *asynq.Client
}

func newClientBundle(t *testing.T) *clientBundle {
	t.Helper()
	ns := redistest.NewNamespace(t, "client")
	rdb := ns.RDB
	client, err := New(Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.Prefix, ResultTTL: time.Hour})
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

func ptr[T any](v T) *T { return &v }
