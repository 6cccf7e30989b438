package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// The recent indexes: what the dashboard lists. Each is a sorted set,
// capped and expiring, of a tenant's (or every tenant's) most recent jobs,
// batches or sessions; a job joins when it is claimed (Admit), a batch
// when its record is made, a session when its record is first written.
// An entry may outlive what it names (a job whose Result expired, a
// claim rolled back): readers skip those.
const (
	// RecentJobs caps a tenant's recent-jobs index.
	RecentJobs = 1000
	// RecentBatches caps a tenant's recent-batches index.
	RecentBatches = 200
	// RecentAll caps each every-tenant index (jobs, batches, sessions).
	RecentAll = 5000
)

// Recent is one entry of a recent index.
type Recent struct {
	// ID is the job's, batch's or session's stored ID.
	ID string
	// Tenant owns it ("" the anonymous tenant).
	Tenant string
	// Lang is a job's language; empty for batches and sessions.
	Lang string
	// At is when it was enqueued or made.
	At time.Time
}

// RecentJobs returns up to n of tenant's most recent jobs (every tenant's
// when all), newest first.
func (s *Store) RecentJobs(ctx context.Context, tenant string, all bool, n int) ([]Recent, error) {
	return s.recent(ctx, s.recentKey("jobs", tenant, all), n)
}

// RecentBatches returns up to n of tenant's most recent batches (every
// tenant's when all), newest first.
func (s *Store) RecentBatches(ctx context.Context, tenant string, all bool, n int) ([]Recent, error) {
	return s.recent(ctx, s.recentKey("batches", tenant, all), n)
}

// RecentSessions returns up to n of every tenant's most recent sessions,
// newest first (a tenant's own are in its SessionsKey).
func (s *Store) RecentSessions(ctx context.Context, n int) ([]Recent, error) {
	return s.recent(ctx, s.recentKey("sessions", "", true), n)
}

func (s *Store) recent(ctx context.Context, key string, n int) ([]Recent, error) {
	if n <= 0 {
		return nil, nil
	}
	zs, err := s.rdb.ZRevRangeWithScores(ctx, key, 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read recent index: %w", err)
	}
	out := make([]Recent, 0, len(zs))
	seen := map[string]bool{}
	for _, z := range zs {
		m, _ := z.Member.(string)
		parts := strings.SplitN(m, "\t", 3)
		if len(parts) < 2 || seen[parts[0]] {
			continue // an ID used again after its first job expired: the newest only
		}
		seen[parts[0]] = true
		r := Recent{ID: parts[0], Tenant: parts[1], At: time.UnixMilli(int64(z.Score)).UTC()}
		if len(parts) == 3 {
			r.Lang = parts[2]
		}
		out = append(out, r)
	}
	return out, nil
}

// addRecent adds id to tenant's and every tenant's index of what, within
// their caps, renewing their TTL.
func (s *Store) addRecent(ctx context.Context, p redis.Pipeliner, what, id, tenant string, at time.Time, perTenant int, ttl time.Duration) {
	member := id + "\t" + tenant
	keys := []string{s.recentKey(what, "", true)}
	caps := []int{RecentAll}
	if perTenant > 0 {
		keys, caps = append(keys, s.recentKey(what, tenant, false)), append(caps, perTenant)
	}
	for i, k := range keys {
		p.ZAdd(ctx, k, redis.Z{Score: float64(at.UnixMilli()), Member: member})
		p.ZRemRangeByRank(ctx, k, 0, int64(-caps[i]-1))
		p.Expire(ctx, k, ttl)
	}
}

// recentSessionsTTL is the every-tenant sessions index's TTL: a session's
// longest life and its retention.
const recentSessionsTTL = jobs.MaxSessionLifetime + jobs.SessionRetention

// FleetWorker is what a worker publishes of itself: its job slots (while
// its owner heartbeat lives) and its free session slots.
type FleetWorker struct {
	// Owner names the worker (its pool's owner).
	Owner string
	// Alive: its owner heartbeat (sandq-owner:<owner>) is current.
	Alive bool
	// JobSlots is its job slots (P:fleet); -1 when it published none.
	JobSlots int
	// SessionSlots is its free session slots (P:sess-slots); -1 when it
	// published none.
	SessionSlots int
}

// Fleet returns every worker that published job or session slots, by
// owner, with whether its heartbeat is current. It changes nothing (the
// admissions' FleetSlots forgets dead workers).
func (s *Store) Fleet(ctx context.Context) ([]FleetWorker, error) {
	var jobSlots, sessSlots *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		jobSlots, sessSlots = p.HGetAll(ctx, s.fleetKey()), p.HGetAll(ctx, s.SessionSlotsKey())
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: read fleet: %w", err)
	}
	byOwner := map[string]*FleetWorker{}
	get := func(owner string) *FleetWorker {
		if w := byOwner[owner]; w != nil {
			return w
		}
		w := &FleetWorker{Owner: owner, JobSlots: -1, SessionSlots: -1}
		byOwner[owner] = w
		return w
	}
	for owner, v := range jobSlots.Val() {
		get(owner).JobSlots, _ = strconv.Atoi(v)
	}
	for owner, v := range sessSlots.Val() {
		get(owner).SessionSlots, _ = strconv.Atoi(v)
	}
	out := make([]FleetWorker, 0, len(byOwner))
	cmds := make([]*redis.IntCmd, 0, len(byOwner))
	owners := slices.Sorted(maps.Keys(byOwner))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, owner := range owners {
			cmds = append(cmds, p.Exists(ctx, OwnerKey(owner)))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: read fleet: %w", err)
	}
	for i, owner := range owners {
		w := *byOwner[owner]
		w.Alive = cmds[i].Val() > 0
		out = append(out, w)
	}
	return out, nil
}

// Exist reports, for each of ids, whether its Result is stored: asked of
// Redis for the ids check selects (by index), true for the others, in one
// round trip.
func (s *Store) Exist(ctx context.Context, ids []string, check func(i int) bool) ([]bool, error) {
	out := make([]bool, len(ids))
	cmds := make(map[int]*redis.IntCmd)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if out[i] = !check(i); !out[i] {
				cmds[i] = p.Exists(ctx, s.ResultKey(id))
			}
		}
		return nil
	}); err != nil && len(cmds) > 0 {
		return nil, fmt.Errorf("store: read results: %w", err)
	}
	for i, cmd := range cmds {
		out[i] = cmd.Val() > 0
	}
	return out, nil
}
