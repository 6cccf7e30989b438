package client

import (
	"context"
	"testing"
	"time"

	"github.com/sandq/sandq/jobs"

	"github.com/stretchr/testify/require"
)

// collect reads job id's stream after "after" to its end.
func collect(t *testing.T, c *Client, id, after string) []jobs.StreamEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []jobs.StreamEntry
	for e, err := range c.Stream(ctx, id, after) {
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func TestStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LiveThenEnd", func(t *testing.T) {
		t.Parallel()
		b := newClientBundle(t)
		info, err := b.client.Enqueue(ctx, jobs.Job{Lang: "python", Code: "x", Stream: true})
		require.NoError(t, err)
		id, st := info.ID, b.client.Store()

		// A reader that starts before anything is written follows live.
		got := make(chan []jobs.StreamEntry, 1)
		go func() { got <- collect(t, b.client, id, "") }()
		binary := []byte{0, 0xff, 0xfe, '\n', 0x80}
		require.NoError(t, st.AppendStream(ctx, id, time.Minute, []jobs.StreamEntry{
			{Attempt: 1, Step: "run", Stream: "stdout", Offset: 0, Data: []byte("line 1\n")},
			{Attempt: 1, Step: "run", Stream: "stderr", Offset: 0, Data: binary},
		}))
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, st.AppendStream(ctx, id, time.Minute, []jobs.StreamEntry{
			{Attempt: 1, Step: "run", Stream: "stdout", Offset: 7, Data: []byte("line 2\n"), Dropped: 0},
			{Attempt: 1, Step: "run", Stream: "stdout", Offset: 100, Dropped: 86, Limit: true},
		}))
		_, _, err = st.Put(ctx, jobs.Result{ID: id, Status: jobs.StatusOutputLimit, Attempts: 1})
		require.NoError(t, err)
		require.NoError(t, st.EndStream(ctx, id, 1, jobs.StatusOutputLimit, time.Minute))

		entries := <-got
		require.Len(t, entries, 5)
		require.Equal(t, "line 1\n", string(entries[0].Data))
		require.Equal(t, binary, entries[1].Data, "bytes exact")
		require.Equal(t, "stderr", entries[1].Stream)
		require.Equal(t, int64(7), entries[2].Offset)
		require.Equal(t, jobs.StreamEntry{ID: entries[3].ID, Attempt: 1, Step: "run", Stream: "stdout", Offset: 100, Dropped: 86, Limit: true}, entries[3])
		require.True(t, entries[4].End())
		require.Equal(t, jobs.StatusOutputLimit, entries[4].Status)

		// A reader after the end sees the same; one resuming after an
		// entry sees the rest.
		require.Equal(t, entries, collect(t, b.client, id, ""))
		require.Equal(t, entries[2:], collect(t, b.client, id, entries[1].ID))
		ttl, err := b.rdb.PTTL(ctx, st.StreamKey(id)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second, "the stream expires after its last write")
	})

	t.Run("NotStreamedReadsTheResult", func(t *testing.T) {
		t.Parallel()
		b := newClientBundle(t)
		info, err := b.client.Enqueue(ctx, jobs.Job{Lang: "python", Code: "x"})
		require.NoError(t, err)
		r := jobs.Result{ID: info.ID, Status: jobs.StatusFailed, Attempts: 1, Compile: &jobs.StepResult{}}
		r.SetStdout([]byte("out"))
		r.SetStderr([]byte{0xff})
		r.Compile.SetStderr([]byte("warning"))
		got := make(chan []jobs.StreamEntry, 1)
		go func() { got <- collect(t, b.client, info.ID, "") }()
		time.Sleep(100 * time.Millisecond)
		_, _, err = b.client.Store().Put(ctx, r)
		require.NoError(t, err)
		entries := <-got
		require.Equal(t, []jobs.StreamEntry{
			{Attempt: 1, Step: "compile", Stream: "stderr", Data: []byte("warning"), FromResult: true},
			{Attempt: 1, Step: "run", Stream: "stdout", Data: []byte("out"), FromResult: true},
			{Attempt: 1, Step: "run", Stream: "stderr", Data: []byte{0xff}, FromResult: true},
			{Attempt: 1, Status: jobs.StatusFailed},
		}, entries)
	})

	t.Run("EndsWithoutAnEndEntry", func(t *testing.T) {
		t.Parallel()
		b := newClientBundle(t)
		info, err := b.client.Enqueue(ctx, jobs.Job{Lang: "python", Code: "x", Stream: true})
		require.NoError(t, err)
		st := b.client.Store()
		require.NoError(t, st.AppendStream(ctx, info.ID, time.Minute, []jobs.StreamEntry{{Attempt: 1, Step: "run", Stream: "stdout", Data: []byte("partial")}}))
		// The worker stored the final result, and its end entry was lost.
		_, _, err = st.Put(ctx, jobs.Result{ID: info.ID, Status: jobs.StatusTimeout, Attempts: 1})
		require.NoError(t, err)
		entries := collect(t, b.client, info.ID, "")
		require.Len(t, entries, 2)
		require.Equal(t, "partial", string(entries[0].Data))
		require.Equal(t, jobs.StatusTimeout, entries[1].Status)
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		b := newClientBundle(t)
		for _, err := range b.client.Stream(ctx, "nope", "") {
			require.ErrorIs(t, err, jobs.ErrNotFound)
		}
	})
}
