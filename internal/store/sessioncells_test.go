package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// A session's cell history keeps the last SessionCellsKept cells, oldest
// first, each with the heads of its code and output, and expires.
func TestSessionCells(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "cells")
	at := time.Now().UTC().Truncate(time.Millisecond)
	for i := range store.SessionCellsKept + 5 {
		r := jobs.CellResult{ID: fmt.Sprintf("c%d", i), Status: jobs.CellOK, ExecutionCount: i + 1, Stdout: fmt.Sprint(i)}
		require.NoError(t, n.Store.AppendSessionCell(ctx, "s1", store.SessionCellOf(fmt.Sprintf("print(%d)", i), r, at)))
	}
	big := jobs.CellResult{ID: "big", Status: jobs.CellError, Stdout: strings.Repeat("x", 10<<10),
		Results: []jobs.Display{{Data: map[string]string{"text/plain": "42"}}, {Data: map[string]string{"image/png": "iVBOR"}}},
		Error:   &jobs.CellErrorInfo{Name: "ValueError", Value: "boom"}}
	require.NoError(t, n.Store.AppendSessionCell(ctx, "s1", store.SessionCellOf("raise ValueError('boom')", big, at)))

	cells, err := n.Store.SessionCells(ctx, "s1")
	require.NoError(t, err)
	require.Len(t, cells, store.SessionCellsKept)
	require.Equal(t, "c6", cells[0].ID, "the oldest kept: the first six are gone")
	require.Equal(t, "print(6)", cells[0].Code)
	require.Equal(t, "6", cells[0].Stdout)
	last := cells[len(cells)-1]
	require.Equal(t, "big", last.ID)
	require.Len(t, last.Stdout, store.SessionCellHead)
	require.True(t, last.Cut)
	require.Equal(t, "ValueError: boom", last.Error)
	require.Equal(t, 2, last.Results)
	require.Equal(t, []string{"42"}, last.Values, "the plain-text forms only")
	require.Equal(t, jobs.CellError, last.Status)

	ttl, err := n.RDB.TTL(ctx, n.Store.SessionCellsKey("s1")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, jobs.MaxSessionLifetime)
	none, err := n.Store.SessionCells(ctx, "other")
	require.NoError(t, err)
	require.Empty(t, none)
}

// ReplyCell writes the session's record and the cell's history with the
// reply, in one transaction: whoever has the reply finds both. Without a
// record (an ended session's is written by the end), the record stays as
// it was.
func TestReplyCellWritesRecordAndHistoryWithTheReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "replycell")
	now := time.Now().UTC().Truncate(time.Millisecond)
	info := jobs.SessionInfo{ID: "s1", Tenant: "t", Lang: "python", State: jobs.SessionReady, Worker: "w1",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), LastUsedAt: now, ExecutionCount: 1}
	require.NoError(t, n.Store.PutSession(ctx, info))

	info.ExecutionCount, info.LastUsedAt = 2, now.Add(time.Second)
	out := jobs.CellResult{ID: "c2", Status: jobs.CellOK, ExecutionCount: 2, Stdout: "2\n"}
	reply := store.SessionReply{Cell: &out, Info: &info}
	require.NoError(t, n.Store.ReplyCell(ctx, "req1", reply, &info, info.ID, store.SessionCellOf("x += 1", out, now)))

	got, err := n.Store.AwaitReply(ctx, "w1", "req1", time.Now().Add(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, "2\n", got.Cell.Stdout)
	stored, err := n.Store.GetSession(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, 2, stored.ExecutionCount, "the record went with the reply")
	cells, err := n.Store.SessionCells(ctx, "s1")
	require.NoError(t, err)
	require.Len(t, cells, 1)
	require.Equal(t, "x += 1", cells[0].Code)
	ttl, err := n.RDB.TTL(ctx, n.Store.SessionReplyKey("req1")).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-2), ttl, "the reply was taken; nothing left of it")

	// No record: only the history and the reply.
	info.ExecutionCount = 3
	out.ID = "c3"
	require.NoError(t, n.Store.ReplyCell(ctx, "req2", store.SessionReply{Cell: &out, Info: &info}, nil, info.ID, store.SessionCellOf("x += 1", out, now)))
	_, err = n.Store.AwaitReply(ctx, "w1", "req2", time.Now().Add(5*time.Second))
	require.NoError(t, err)
	stored, err = n.Store.GetSession(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, 2, stored.ExecutionCount)
	cells, err = n.Store.SessionCells(ctx, "s1")
	require.NoError(t, err)
	require.Len(t, cells, 2)
}
