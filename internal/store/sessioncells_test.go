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
