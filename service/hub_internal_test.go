package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// TestHubHandsOverANoticedResult: a request waiting on a job through the
// hub is woken by its done message and, for a small final Result, finds it
// in the message (no read); a large one's message is its status, and the
// request reads the Result.
func TestHubHandsOverANoticedResult(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := redistest.NewNamespace(t, "hub")
	st, err := store.New(ns.RDB, store.Config{Prefix: ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	h := newHub(st, zerolog.Nop())
	go h.run(ctx)
	require.NoError(t, h.waitReady(ctx))

	for _, tc := range []struct {
		id, stdout string
		noticed    bool
	}{
		{"small", "1\n", true},
		{"large", strings.Repeat("x", store.NoticeResultMax), false},
	} {
		w, stop := h.watch(tc.id)
		_, _, err := st.Put(ctx, jobs.Result{ID: tc.id, Status: jobs.StatusSucceeded, Output: jobs.Output{Stdout: tc.stdout}})
		require.NoError(t, err)
		select {
		case <-w.ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not woken", tc.id)
		}
		r, ok := h.noticed(w, tc.id)
		require.Equal(t, tc.noticed, ok, tc.id)
		if ok {
			require.Equal(t, tc.stdout, r.Stdout)
			require.Equal(t, jobs.StatusSucceeded, r.Status)
		}
		_, ok = h.noticed(w, "another")
		require.False(t, ok, "another job's Result")
		stop()
	}
}
