package client_test

import (
	"cmp"
	"context"
	"fmt"
	"os"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// A producer enqueues a job, finds it queued, learns that a second enqueue
// of the same ID is a no-op, and cancels it. No worker runs here, so the
// job stays queued until canceled.
func ExampleClient() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("SANDQ_REDIS_ADDR"), "127.0.0.1:6379")})
	defer rdb.Close()

	// A private namespace so the example does not meet other users of this
	// Redis; production uses the defaults ("sandq", queues unprefixed).
	ns := "sandqexample-" + jobs.NewID()[:16]
	defer cleanup(rdb, ns)

	c, err := client.New(client.Config{Redis: rdb, Prefix: ns, QueuePrefix: ns})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	job := jobs.Job{ID: "hello-1", Lang: "py", Code: `print("hello")`, Limits: jobs.Limits{TimeoutMS: 2000}}
	info, err := c.Enqueue(ctx, job)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("enqueued %s on %s (existing: %v)\n", info.ID, info.Queue, info.Existing)

	again, err := c.Enqueue(ctx, job)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("enqueued again: existing: %v, status %s\n", again.Existing, again.Status)

	r, err := c.Get(ctx, "hello-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("get: %s, lang %s\n", r.Status, r.Lang)

	if err := c.Cancel(ctx, "hello-1"); err != nil {
		fmt.Println(err)
		return
	}
	r, err = c.Wait(ctx, "hello-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("wait: %s (%s)\n", r.Status, r.Reason)

	_, err = c.Enqueue(ctx, jobs.Job{Lang: "cobol", Code: "DISPLAY 'HI'."})
	fmt.Println(err)

	// Output:
	// enqueued hello-1 on default (existing: false)
	// enqueued again: existing: true, status queued
	// get: queued, lang python
	// wait: canceled (canceled while queued)
	// jobs: invalid job: lang: unknown language "cobol"; supported: bash, c, c++, cc, cpp, cxx, go, golang, java, javascript, js, node, nodejs, py, python, python3, r, rb, rs, ruby, rust, sh, shell, ts, typescript
}

// cleanup removes the example's keys and asynq queues.
func cleanup(rdb *redis.Client, ns string) {
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, q := range jobs.Queues() {
		_ = insp.DeleteQueue(store.AsynqQueue(ns, q), true)
	}
	for _, pattern := range []string{ns + ":*", "asynq:{" + ns + ":*"} {
		if keys, err := rdb.Keys(ctx, pattern).Result(); err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}
}
