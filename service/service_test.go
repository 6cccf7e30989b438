package service_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// The service's rules, one by one, without HTTP: the doors (api,
// mcpserver, cmd/enqueue) are tested for how they map them.

type testBundle struct {
	ns     *jobstest.Namespace
	client *client.Client
	svc    *service.Service
	keys   *service.Keys
}

func setup(t *testing.T, mod func(*service.Config)) *testBundle {
	t.Helper()
	ns := jobstest.NewNamespace(t, "svc")
	b := &testBundle{ns: ns, client: ns.Client(t), keys: service.NewKeys(ns.Store)}
	cfg := service.Config{Client: b.client, Webhooks: service.WebhookConfig{AllowHosts: []string{"127.0.0.1"}}}
	if mod != nil {
		mod(&cfg)
	}
	svc, err := service.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	b.svc = svc
	return b
}

// caller makes an API key for tenant and authenticates it.
func (b *testBundle) caller(t *testing.T, tenant string, o service.KeyOptions) service.Caller {
	t.Helper()
	key, _, err := b.keys.Create(context.Background(), tenant, o)
	require.NoError(t, err)
	c, err := b.svc.Authenticate(context.Background(), key)
	require.NoError(t, err)
	return c
}

// requireKind checks err is a *service.Error of kind and returns it.
func requireKind(t *testing.T, err error, kind service.Kind) *service.Error {
	t.Helper()
	var e *service.Error
	require.True(t, errors.As(err, &e), "error %v (%T) is not a *service.Error", err, err)
	require.Equal(t, kind, e.Kind, "%v", err)
	return e
}

func job(id, code string) service.JobRequest {
	return service.JobRequest{Job: jobs.Job{ID: id, Lang: "python", Code: code}}
}

func TestTenantsOwnTheirIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.ns.StartFakeWorker(t)
	a, other := b.caller(t, "tenant-a", service.KeyOptions{}), b.caller(t, "tenant-b", service.KeyOptions{})

	stored, err := b.svc.SubmitJob(ctx, a, job("x", "print('a')"))
	require.NoError(t, err)
	require.Equal(t, service.StoredID("tenant-a", "x"), stored, "stored under the tenant's prefix")
	require.NotEqual(t, "x", stored)
	_, err = b.svc.SubmitJob(ctx, other, job("x", "print('b')"))
	require.NoError(t, err, "B's x is another job: no conflict with A's")

	ra, err := b.svc.Job(ctx, a, "x", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "x", ra.ID, "the caller reads its own ID")
	require.Equal(t, "print('a')", ra.Stdout)
	rb, err := b.svc.Job(ctx, other, "x", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "print('b')", rb.Stdout)

	_, err = b.svc.Job(ctx, other, stored, 0)
	requireKind(t, err, service.NotFound) // A's stored ID, spelled out by B, is B's (unknown) job
	requireKind(t, b.svc.CancelJob(ctx, other, stored), service.NotFound)
	_, err = b.svc.SubmitJob(ctx, a, job("x", "again"))
	e := requireKind(t, err, service.Conflict)
	require.Equal(t, "the tenant already has a job x (status succeeded)", e.Msg, "the caller's ID, not the stored one")

	op := service.Operator("")
	r, err := b.svc.Job(ctx, op, stored, 0)
	require.NoError(t, err, "the operator reads any job by its stored ID")
	require.Equal(t, stored, r.ID)
}

func TestSubmitChecksTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	c := b.caller(t, "acme", service.KeyOptions{MaxLimits: jobs.Limits{MemoryMB: 128}})

	for _, tt := range []struct {
		name  string
		req   service.JobRequest
		msg   string
		field string
	}{
		{"TenantInBody", service.JobRequest{Job: jobs.Job{Lang: "python", Code: "x", Tenant: "evil"}}, "invalid job", "tenant"},
		{"IDTooLong", job(strings.Repeat("i", service.MaxClientIDBytes+1), "x"), "invalid job", "id"},
		{"UnknownLanguage", service.JobRequest{Job: jobs.Job{Lang: "cobol", Code: "x"}}, "invalid job", "lang"},
		{"OverTheKeysCap", service.JobRequest{Job: jobs.Job{Lang: "python", Code: "x", Limits: jobs.Limits{MemoryMB: 129}}}, "invalid job", "limits.memory_mb"},
		{"PrivateCallback", service.JobRequest{Job: jobs.Job{Lang: "python", Code: "x"}, CallbackURL: "http://10.1.2.3/hook"}, "invalid callback_url", "callback_url"},
		{"CallbackScheme", service.JobRequest{Job: jobs.Job{Lang: "python", Code: "x"}, CallbackURL: "ftp://example.com/"}, "invalid callback_url", "callback_url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.svc.SubmitJob(ctx, c, tt.req)
			e := requireKind(t, err, service.Invalid)
			require.Equal(t, tt.msg, e.Msg)
			require.Equal(t, tt.field, e.Field)
			require.NotEmpty(t, e.Detail)
			require.NotContains(t, e.Error(), service.StoredID("acme", ""), "no tenant prefix in what the caller reads")
		})
	}

	// The key's cap also lowers a default that would pass it: C++'s 512 MiB.
	stored, err := b.svc.SubmitJob(ctx, c, service.JobRequest{Job: jobs.Job{ID: "cpp", Lang: "cpp", Code: "int main(){}"}})
	require.NoError(t, err)
	info, err := asynq.NewInspectorFromRedisClient(b.ns.RDB).GetTaskInfo(store.AsynqQueue(b.ns.Prefix, jobs.QueueDefault), stored)
	require.NoError(t, err)
	enqueued, err := jobs.DecodeJob(info.Payload)
	require.NoError(t, err)
	require.Equal(t, int64(128), enqueued.Limits.MemoryMB, "C++'s own 512 MiB default is past the key's cap of 128")
	require.Zero(t, enqueued.Limits.TimeoutMS, "a default under the cap is left to the worker")
}

func TestScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	ro := b.caller(t, "acme", service.KeyOptions{Scopes: []string{service.ScopeRead}})
	_, err := b.svc.SubmitJob(ctx, ro, job("", "x"))
	e := requireKind(t, err, service.Forbidden)
	require.Equal(t, "this API key lacks the jobs:write scope", e.Msg)
	requireKind(t, b.svc.CancelJob(ctx, ro, "x"), service.Forbidden)
	_, err = b.svc.OpenSession(ctx, ro, jobs.SessionSpec{Lang: "python"})
	requireKind(t, err, service.Forbidden)
	_, err = b.svc.SubmitBatch(ctx, ro, "", []service.JobRequest{job("", "x")}, func(int) string { return "" })
	requireKind(t, err, service.Forbidden)

	// The critical queue is a scope of its own.
	rw := b.caller(t, "acme", service.KeyOptions{})
	crit := job("", "x")
	crit.Queue = jobs.QueueCritical
	_, err = b.svc.SubmitJob(ctx, rw, crit)
	e = requireKind(t, err, service.Forbidden)
	require.Contains(t, e.Msg, "critical queue")
	vip := b.caller(t, "acme", service.KeyOptions{Scopes: []string{service.ScopeWrite, service.ScopeCritical}})
	_, err = b.svc.SubmitJob(ctx, vip, crit)
	require.NoError(t, err)
	crit.Queue = jobs.QueueBatch
	_, err = b.svc.SubmitJob(ctx, rw, crit)
	require.NoError(t, err, "default and batch need no scope")
}

// TestNetworkScope: a network policy needs the key's network:egress
// scope, and stays within the operator's --run-allow-hosts (the
// service's policy) whatever the key.
func TestNetworkScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	netClient, err := client.New(client.Config{Redis: b.ns.RDB, Prefix: b.ns.Prefix, QueuePrefix: b.ns.Prefix,
		Policy: jobs.Policy{NetworkAllow: []string{"api.example.com:443"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = netClient.Close() })
	svc, err := service.New(ctx, service.Config{Client: netClient})
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	keys := service.NewKeys(b.ns.Store)
	caller := func(o service.KeyOptions) service.Caller {
		key, _, err := keys.Create(ctx, "acme", o)
		require.NoError(t, err)
		c, err := svc.Authenticate(ctx, key)
		require.NoError(t, err)
		return c
	}
	withNet := func(allow ...string) service.JobRequest {
		r := job("", "x")
		r.Job.Network = &jobs.NetworkPolicy{Allow: allow}
		return r
	}

	rw := caller(service.KeyOptions{})
	_, err = svc.SubmitJob(ctx, rw, withNet("api.example.com:443"))
	e := requireKind(t, err, service.Forbidden)
	require.Equal(t, "this API key may not ask for a network (its scope network:egress)", e.Msg)
	_, err = svc.OpenSession(ctx, rw, jobs.SessionSpec{Lang: "python", Network: &jobs.NetworkPolicy{Allow: []string{"api.example.com:443"}}})
	requireKind(t, err, service.Forbidden)
	_, err = svc.SubmitJob(ctx, rw, job("", "x"))
	require.NoError(t, err, "no network needs no scope")

	netKey := caller(service.KeyOptions{Scopes: []string{service.ScopeWrite, service.ScopeNetwork}})
	id, err := svc.SubmitJob(ctx, netKey, withNet("API.example.com:443"))
	require.NoError(t, err)
	_, err = svc.SubmitJob(ctx, netKey, withNet("example.org:443"))
	e = requireKind(t, err, service.Invalid)
	require.Equal(t, "network.allow[0]", e.Field)
	require.Contains(t, e.Detail, "not among the destinations the operator allows (--run-allow-hosts)")

	// The enqueued job's policy is canonical (what the worker's pool key
	// and the result name).
	info, err := asynq.NewInspectorFromRedisClient(b.ns.RDB).GetTaskInfo(store.AsynqQueue(b.ns.Prefix, jobs.QueueDefault), id)
	require.NoError(t, err)
	enqueued, err := jobs.DecodeJob(info.Payload)
	require.NoError(t, err)
	require.Equal(t, &jobs.NetworkPolicy{Allow: []string{"api.example.com:443"}}, enqueued.Network)

	// The service of an operator who allows no network refuses every
	// policy, whatever the key's scopes.
	_, err = b.svc.SubmitJob(ctx, b.caller(t, "acme", service.KeyOptions{Scopes: []string{service.ScopeWrite, service.ScopeNetwork}}), withNet("api.example.com:443"))
	e = requireKind(t, err, service.Invalid)
	require.Contains(t, e.Detail, "this deployment allows no network")
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *service.Config) { c.RatePerSecond = 1000 })
	key, rec, err := b.keys.Create(ctx, "acme", service.KeyOptions{RatePerSecond: 2, MaxQueued: 7})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(key, "sqk_"+rec.ID+"_"))
	c, err := b.svc.Authenticate(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "acme", c.Tenant)
	require.Equal(t, rec.WebhookSecret, c.WebhookSecret)
	require.ElementsMatch(t, service.DefaultScopes, c.Scopes)

	// Its rate: 2 a second, over every process (the count is in Redis).
	var refused *service.Error
	for range 5 {
		if _, err := b.svc.Authenticate(ctx, key); err != nil {
			refused = requireKind(t, err, service.TooMany)
			break
		}
	}
	require.NotNil(t, refused, "a third request within the second is refused")
	require.Equal(t, time.Second, refused.RetryAfter)

	for _, bad := range []string{"", "nope", "sqk_nope_nope", key + "x", strings.Repeat("sqk_", 40)} {
		_, err := b.svc.Authenticate(ctx, bad)
		requireKind(t, err, service.Unauthorized)
	}
	require.NoError(t, b.keys.Revoke(ctx, rec.ID))
	_, err = b.svc.Authenticate(ctx, key)
	requireKind(t, err, service.Unauthorized)
	require.ErrorIs(t, b.keys.Revoke(ctx, rec.ID), service.ErrNoKey)
	_, _, err = b.keys.Create(ctx, "acme", service.KeyOptions{Scopes: []string{"jobs:admin"}})
	require.ErrorContains(t, err, `unknown scope "jobs:admin"`)
}

func TestAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	c := b.caller(t, "capped", service.KeyOptions{MaxQueued: 2})
	for _, id := range []string{"a", "b"} {
		_, err := b.svc.SubmitJob(ctx, c, job(id, "x"))
		require.NoError(t, err)
	}
	_, err := b.svc.SubmitJob(ctx, c, job("c", "x"))
	e := requireKind(t, err, service.TooMany)
	require.Equal(t, "the tenant has 2 jobs queued or running; its cap is 2 (this request adds 1)", e.Msg)
	require.Equal(t, 5*time.Second, e.RetryAfter)
	_, err = b.svc.SubmitBatch(ctx, c, "", []service.JobRequest{job("d", "x")}, func(int) string { return "" })
	requireKind(t, err, service.TooMany)

	// A job that ends leaves the count: the next is admitted.
	require.NoError(t, b.svc.CancelJob(ctx, c, "a"))
	_, err = b.svc.SubmitJob(ctx, c, job("c", "x"))
	require.NoError(t, err)

	// The operator's tools are not counted.
	for _, id := range []string{"op1", "op2", "op3"} {
		_, err := b.svc.SubmitJob(ctx, service.Operator("capped"), job(id, "x"))
		require.NoError(t, err)
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.ns.StartFakeWorker(t)
	c, other := b.caller(t, "acme", service.KeyOptions{}), b.caller(t, "umbrella", service.KeyOptions{})
	_, err := b.svc.SubmitJob(ctx, c, job("dup", "x"))
	require.NoError(t, err)

	where := func(i int) string { return "body[" + string(rune('0'+i)) + "]" }
	created, err := b.svc.SubmitBatch(ctx, c, "b1", []service.JobRequest{
		job("ok1", "print(1)"), {Job: jobs.Job{Lang: "cobol", Code: "x"}}, job("dup", "x"), job("fail", "# FAIL"),
	}, where)
	require.NoError(t, err)
	require.Equal(t, "b1", created.ID)
	require.Equal(t, 4, created.Total)
	require.Equal(t, 2, created.Enqueued)
	require.NoError(t, created.Items[0].Err)
	require.Equal(t, "ok1", created.Items[0].ID)
	bad := requireKind(t, created.Items[1].Err, service.Invalid)
	require.Equal(t, "body[1].lang", bad.Location())
	requireKind(t, created.Items[2].Err, service.Conflict)
	require.Equal(t, "dup", created.Items[2].ID)

	_, err = b.svc.SubmitBatch(ctx, c, "b1", []service.JobRequest{job("", "x")}, where)
	requireKind(t, err, service.Conflict)
	_, err = b.svc.SubmitBatch(ctx, c, "empty", nil, where)
	requireKind(t, err, service.Invalid)

	results, err := b.svc.BatchResults(ctx, c, "b1")
	require.NoError(t, err)
	got := map[string]jobs.Status{}
	require.NoError(t, results(ctx, func(v service.JobView) error {
		got[v.ID] = v.Status
		return nil
	}))
	require.Equal(t, map[string]jobs.Status{"ok1": jobs.StatusSucceeded, "dup": jobs.StatusSucceeded, "fail": jobs.StatusFailed}, got,
		"every job of the batch, by the tenant's IDs")
	p, err := b.svc.Batch(ctx, c, "b1")
	require.NoError(t, err)
	require.Equal(t, 3, p.Total)
	require.Equal(t, 3, p.Done)
	require.Equal(t, map[jobs.Status]int{jobs.StatusSucceeded: 2, jobs.StatusFailed: 1}, p.Counts)

	_, err = b.svc.Batch(ctx, other, "b1")
	requireKind(t, err, service.NotFound)
	_, err = b.svc.BatchResults(ctx, other, "b1")
	requireKind(t, err, service.NotFound)
}

func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *service.Config) { c.MaxSessions = 1 })
	b.ns.StartFakeSessionWorker(t, 4)
	c, other := b.caller(t, "acme", service.KeyOptions{}), b.caller(t, "umbrella", service.KeyOptions{})

	info, err := b.svc.OpenSession(ctx, c, jobs.SessionSpec{ID: "s1", Lang: "python"})
	require.NoError(t, err)
	require.Equal(t, "s1", info.ID)
	require.Equal(t, jobs.SessionReady, info.State)
	_, err = b.svc.OpenSession(ctx, c, jobs.SessionSpec{ID: "s2", Lang: "python"})
	e := requireKind(t, err, service.TooMany)
	require.Contains(t, e.Msg, "the cap is 1")
	_, err = b.svc.OpenSession(ctx, c, jobs.SessionSpec{Lang: "go"})
	requireKind(t, err, service.Invalid)

	r, err := b.svc.Exec(ctx, c, "s1", jobs.Cell{Code: "1+1"})
	require.NoError(t, err)
	require.Equal(t, jobs.CellOK, r.Status)
	_, err = b.svc.Exec(ctx, other, "s1", jobs.Cell{Code: "1"})
	requireKind(t, err, service.NotFound)
	_, err = b.svc.Exec(ctx, c, "s1", jobs.Cell{Code: "1", TimeoutMS: -1})
	bad := requireKind(t, err, service.Invalid)
	require.Equal(t, "timeout_ms", bad.Field)
	err = b.svc.Upload(ctx, c, "s1", "../x", nil)
	requireKind(t, err, service.Invalid)

	closed, err := b.svc.CloseSession(ctx, c, "s1")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionClosed, closed.State)
	_, err = b.svc.Exec(ctx, c, "s1", jobs.Cell{Code: "1"})
	gone := requireKind(t, err, service.Gone)
	require.Equal(t, "session.state", gone.Location())
	require.Equal(t, jobs.SessionClosed, gone.Value)
	_, err = b.svc.OpenSession(ctx, c, jobs.SessionSpec{ID: "s2", Lang: "python"})
	require.NoError(t, err, "a closed session leaves the count")
}

func TestArtifacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *service.Config) { c.ArtifactDir = t.TempDir() })
	c := b.caller(t, "acme", service.KeyOptions{})
	stored := service.StoredID("acme", "j")
	code := 0
	_, _, err := b.ns.Store.Put(ctx, jobs.Result{ID: stored, Tenant: "acme", Status: jobs.StatusSucceeded, ExitCode: &code,
		Artifacts: []jobs.Artifact{{Name: "plots/p.png", Kind: "plot", URL: "/etc/passwd", Size: 1}, {Name: "r.csv", Kind: "file", URL: "https://s3.example/r.csv"}}})
	require.NoError(t, err)

	_, err = b.svc.Artifact(ctx, c, "j", "nope")
	e := requireKind(t, err, service.NotFound)
	require.Equal(t, `job j has no artifact "nope"`, e.Msg)
	a, err := b.svc.Artifact(ctx, c, "j", "r.csv")
	require.NoError(t, err)
	require.True(t, service.Remote(a))
	local, err := b.svc.Artifact(ctx, c, "j", "plots/p.png")
	require.NoError(t, err)
	require.False(t, service.Remote(local))
	_, err = b.svc.OpenArtifact(ctx, c, local)
	requireKind(t, err, service.NotFound) // a path outside the artifact directory is not served
	_, err = b.svc.Artifact(ctx, b.caller(t, "other", service.KeyOptions{}), "j", "r.csv")
	requireKind(t, err, service.NotFound)
}

// Sandq-Signature's v1 is HMAC-SHA256(secret, "<t>.<body>") in hex: a
// known answer, computed apart (printf '1700000000.{"id":"j1"}' | openssl
// dgst -sha256 -hmac whsec_test).
func TestSignKnownAnswer(t *testing.T) {
	t.Parallel()
	require.Equal(t, "dc498648beb37ef9558bf34aa28aad5dd4ab1f611dbc1c741bf02cdd69d71603",
		service.Sign("whsec_test", "1700000000", []byte(`{"id":"j1"}`)))
}

// A Result records its owner, and a tenant's caller sees only its own:
// a result stored under the caller's ID but owned by another tenant (as a
// collision of ID prefixes would make) is NotFound.
func TestOwnershipIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	c := b.caller(t, "acme", service.KeyOptions{})
	code := 0
	_, _, err := b.ns.Store.Put(ctx, jobs.Result{ID: service.StoredID("acme", "planted"), Tenant: "mallory",
		Status: jobs.StatusSucceeded, ExitCode: &code, Artifacts: []jobs.Artifact{{Name: "x", URL: "https://s3.example/x"}}})
	require.NoError(t, err)
	_, err = b.svc.Job(ctx, c, "planted", 0)
	requireKind(t, err, service.NotFound)
	_, err = b.svc.Artifact(ctx, c, "planted", "x")
	requireKind(t, err, service.NotFound)
	requireKind(t, b.svc.CancelJob(ctx, c, "planted"), service.NotFound)
	_, err = b.svc.Follow(ctx, c, "planted", "")
	requireKind(t, err, service.NotFound)

	_, err = b.svc.SubmitJob(ctx, c, job("mine", "x"))
	require.NoError(t, err)
	r, err := b.svc.Job(ctx, c, "mine", 0)
	require.NoError(t, err)
	require.Equal(t, "acme", r.Tenant, "the claim records the tenant")
	require.Len(t, service.StoredID("acme", ""), 34, "128 bits of the tenant's hash in the prefix")
}

// A batch's result stream holds no Redis connection of its own: 200 open
// streams are woken through the process's one subscription.
func TestBatchResultsShareOneSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := jobstest.NewNamespace(t, "streams")
	name := "svc-" + jobs.NewID()[:8]
	rdb := redis.NewClient(&redis.Options{Addr: ns.Addr, ClientName: name, PoolSize: 8})
	t.Cleanup(func() { _ = rdb.Close() })
	cl, err := client.New(client.Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.Prefix})
	require.NoError(t, err)
	svc, err := service.New(ctx, service.Config{Client: cl})
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	keys := service.NewKeys(ns.Store)
	key, _, err := keys.Create(ctx, "acme", service.KeyOptions{})
	require.NoError(t, err)
	c, err := svc.Authenticate(ctx, key)
	require.NoError(t, err)
	_, err = svc.SubmitBatch(ctx, c, "open", []service.JobRequest{job("never", "x")}, func(int) string { return "" })
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 200 {
		results, err := svc.BatchResults(ctx, c, "open")
		require.NoError(t, err)
		wg.Go(func() { _ = results(wctx, func(service.JobView) error { return nil }) })
	}
	require.Eventually(t, func() bool { return svc.Waiting() == 200 }, 10*time.Second, 10*time.Millisecond)
	list, err := ns.RDB.ClientList(ctx).Result()
	require.NoError(t, err)
	conns := strings.Count(list, "name="+name+" ")
	// go-redis keeps a few connections past PoolSize while commands
	// overlap (the submit's claim, its expiry, the workers' wake): 11 seen.
	require.LessOrEqual(t, conns, 8+4, "the pool (8 and the few past it), the one subscription, not one a stream (200): %d connections", conns)
	cancel()
	wg.Wait()
}

// Webhooks: a tenant whose target never answers holds at most its share
// of the senders, so another tenant's hook is delivered at once; a hook is
// recorded only for a job admitted (a refused or existing one leaves the
// existing job's hook alone); a hook whose job is gone stops.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tarpit := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-tarpit:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(tarpit); slow.Close() })
	got := make(chan string, 16)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Sandq-Delivery")
	}))
	t.Cleanup(fast.Close)

	b := setup(t, func(c *service.Config) {
		c.DeliverWebhooks = true
		c.Webhooks = service.WebhookConfig{AllowHosts: []string{"127.0.0.1"}, Timeout: time.Minute, PerTenant: 2, Senders: 8}
	})
	b.ns.StartFakeWorker(t)
	a, other := b.caller(t, "noisy", service.KeyOptions{}), b.caller(t, "quiet", service.KeyOptions{})
	for i := range 10 {
		req := job(fmt.Sprintf("a%d", i), "x")
		req.CallbackURL = slow.URL
		_, err := b.svc.SubmitJob(ctx, a, req)
		require.NoError(t, err)
	}
	_, err := b.svc.Job(ctx, a, "a9", 10*time.Second) // every noisy job has ended: its hooks are due
	require.NoError(t, err)
	req := job("q", "x")
	req.CallbackURL = fast.URL
	_, err = b.svc.SubmitJob(ctx, other, req)
	require.NoError(t, err)
	select {
	case d := <-got:
		require.Equal(t, "q.1", d, "the quiet tenant's first attempt")
	case <-time.After(5 * time.Second):
		t.Fatal("the quiet tenant's hook waited behind the noisy tenant's tarpit")
	}

	// A refused resubmission of q (it exists) does not touch its hook.
	req.CallbackURL = slow.URL
	_, err = b.svc.SubmitJob(ctx, other, req)
	requireKind(t, err, service.Conflict)
	r, err := b.svc.Job(ctx, other, "q", 0)
	require.NoError(t, err)
	var v service.JobView
	require.Eventually(t, func() bool {
		v = b.svc.View(ctx, other, r)
		return v.Webhook != nil && v.Webhook.State == "delivered"
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, fast.URL, v.Webhook.URL, "the hook of the job as first submitted")

	// A refused submission records no hook.
	req = job("bad", "x")
	req.Limits.MemoryMB = 1 << 30
	req.CallbackURL = fast.URL
	_, err = b.svc.SubmitJob(ctx, other, req)
	requireKind(t, err, service.Invalid)
	require.Nil(t, b.svc.View(ctx, other, jobs.Result{ID: "bad"}).Webhook)

	// A hook whose job is gone (its result expired) fails at once, not
	// retried for the record's 7 days.
	require.NoError(t, b.ns.Store.PutWebhook(ctx, "gone", store.Webhook{URL: fast.URL, Tenant: "quiet",
		Status: service.WebhookStatus{URL: fast.URL, State: "pending"}}, time.Hour, time.Now()))
	require.Eventually(t, func() bool {
		w, err := b.ns.Store.GetWebhook(ctx, "gone")
		return err == nil && w.Status.State == "failed" && w.Status.LastError == "the job is gone"
	}, 10*time.Second, 20*time.Millisecond)
}

// A callback URL whose host resolves inside the operator's network is
// refused without naming the address it resolves to.
func TestCallbackRefusalNamesNoAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *service.Config) { c.Webhooks = service.WebhookConfig{} })
	c := b.caller(t, "acme", service.KeyOptions{})
	req := job("", "x")
	req.CallbackURL = "http://localhost:8080/hook"
	_, err := b.svc.SubmitJob(context.Background(), c, req)
	e := requireKind(t, err, service.Invalid)
	require.Contains(t, e.Detail, "localhost resolves to a loopback, private or link-local address")
	require.NotContains(t, e.Error(), "127.0.0.1")
	require.NotContains(t, e.Error(), "::1")
}

// 100 parallel creates against a cap of 8 sessions open 8: the count and
// the creation are one script.
func TestSessionCapHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *service.Config) { c.MaxSessions = 8 })
	b.ns.StartFakeSessionWorker(t, 200)
	c := b.caller(t, "acme", service.KeyOptions{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened, refused := 0, 0
	for i := range 100 {
		wg.Go(func() {
			_, err := b.svc.OpenSession(ctx, c, jobs.SessionSpec{ID: fmt.Sprintf("s%d", i), Lang: "python"})
			mu.Lock()
			defer mu.Unlock()
			switch service.KindOf(err) {
			case 0:
				opened++
			case service.TooMany:
				refused++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 8, opened)
	require.Equal(t, 92, refused)
	list, err := b.svc.Sessions(ctx, c)
	require.NoError(t, err)
	require.Len(t, list, 8)
}
