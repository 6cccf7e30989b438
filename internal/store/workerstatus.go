package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// WorkerStatus is what a worker publishes of itself with each heartbeat,
// for the dashboard's workers page: its pools and the latency of its
// recent jobs. It lives as long as the heartbeat.
type WorkerStatus struct {
	// At is when the worker wrote it.
	At time.Time `json:"at"`
	// Containers counts the worker's job containers, idle and busy.
	Containers int `json:"containers"`
	// Pools are its pools, one per image and settings, by name.
	Pools []PoolStatus `json:"pools"`
	// Latency is the wall time of its recent jobs' programs, by language.
	Latency []LatencyStatus `json:"latency"`
}

// PoolStatus is one pool of a worker: its containers idle (warm) and busy.
type PoolStatus struct {
	Pool string `json:"pool"`
	Idle int    `json:"idle"`
	Busy int    `json:"busy"`
	// Warm: the worker keeps containers of this pool ready (--warm).
	Warm bool `json:"warm,omitempty"`
}

// LatencyBoundsMS are the upper bounds of LatencyStatus.Buckets, in ms; a
// last bucket holds what is above the last bound.
var LatencyBoundsMS = []int64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// LatencyStatus is a histogram of one language's recent jobs' wall times.
type LatencyStatus struct {
	Lang string `json:"lang"`
	// Jobs counts the jobs it holds (the most recent, up to the worker's
	// window).
	Jobs  int   `json:"jobs"`
	P50MS int64 `json:"p50_ms"`
	P99MS int64 `json:"p99_ms"`
	// Buckets counts the jobs by LatencyBoundsMS: Buckets[i] those at most
	// LatencyBoundsMS[i] ms and above the bound before; the last, those
	// above every bound.
	Buckets []int `json:"buckets"`
}

// Latency returns the histogram of wall times (ms) of lang's jobs.
func Latency(lang string, wallMS []int64) LatencyStatus {
	l := LatencyStatus{Lang: lang, Jobs: len(wallMS), Buckets: make([]int, len(LatencyBoundsMS)+1)}
	if len(wallMS) == 0 {
		return l
	}
	sorted := slices.Sorted(slices.Values(wallMS))
	l.P50MS, l.P99MS = sorted[(len(sorted)-1)*50/100], sorted[(len(sorted)-1)*99/100]
	for _, ms := range wallMS {
		i, _ := slices.BinarySearch(LatencyBoundsMS, ms)
		l.Buckets[i]++
	}
	return l
}

// PublishWorkerStatus stores owner's status for ttl (its heartbeat's).
func (s *Store) PublishWorkerStatus(ctx context.Context, owner string, st WorkerStatus, ttl time.Duration) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("store: worker status: %w", err)
	}
	if err := s.rdb.Set(ctx, s.WorkerStatusKey(owner), b, ttl).Err(); err != nil {
		return fmt.Errorf("store: worker status %s: %w", owner, err)
	}
	return nil
}

// WorkerStatuses returns the statuses of owners that have one, by owner.
func (s *Store) WorkerStatuses(ctx context.Context, owners []string) (map[string]WorkerStatus, error) {
	out := map[string]WorkerStatus{}
	if len(owners) == 0 {
		return out, nil
	}
	cmds := make([]*redis.StringCmd, len(owners))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, o := range owners {
			cmds[i] = p.Get(ctx, s.WorkerStatusKey(o))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: read worker statuses: %w", err)
	}
	for i, o := range owners {
		b, err := cmds[i].Bytes()
		if err != nil {
			continue // none, or expired
		}
		var st WorkerStatus
		if json.Unmarshal(b, &st) == nil {
			out[o] = st
		}
	}
	return out, nil
}
