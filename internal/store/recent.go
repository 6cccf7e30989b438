package store

import (
	"context"
	"fmt"
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
