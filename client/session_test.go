package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
)

// A session of a worker whose heartbeat is gone reads as lost, with the
// reason, and stays lost.
func TestSessionOfDeadWorkerIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "lost")
	c := n.Client(t)
	now := time.Now().UTC()
	info := jobs.SessionInfo{ID: "s1", Lang: "python", State: jobs.SessionReady, Worker: "gone",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	created, err := n.Store.CreateSession(ctx, info)
	require.NoError(t, err)
	require.True(t, created)
	again, err := n.Store.CreateSession(ctx, info)
	require.NoError(t, err)
	require.False(t, again, "an ID is created once")

	got, err := c.SessionInfo(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionLost, got.State)
	require.Contains(t, got.Reason, "gone stopped")
	stored, err := n.Store.GetSession(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionLost, stored.State, "recorded")

	s, err := c.Session(ctx, "s1")
	require.NoError(t, err)
	_, err = s.Exec(ctx, jobs.Cell{Code: "1"})
	require.ErrorIs(t, err, jobs.ErrSessionLost)
	_, err = c.Session(ctx, "nope")
	require.ErrorIs(t, err, jobs.ErrSessionNotFound)
	list, err := c.Sessions(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 1)
}
