package agent

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCapture(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		limit  int
		writes []string
		head   string
		tail   string
		trunc  bool
	}{
		{name: "Empty", limit: 8},
		{name: "UnderLimit", limit: 8, writes: []string{"abc", "def"}, head: "abcdef"},
		{name: "ExactlyLimit", limit: 8, writes: []string{"abcdefgh"}, head: "abcdefgh"},
		{name: "OneOver", limit: 8, writes: []string{"abcdefgh", "i"}, head: "abcd", tail: "fghi", trunc: true},
		{name: "ManySmall", limit: 8, writes: []string{"ab", "cd", "ef", "gh", "ij", "kl", "mn"}, head: "abcd", tail: "klmn", trunc: true},
		{name: "OneHuge", limit: 8, writes: []string{"0123456789abcdef"}, head: "0123", tail: "cdef", trunc: true},
		{name: "WrapThenHuge", limit: 6, writes: []string{"abcdef", "gh", "ijklmnop"}, head: "abc", tail: "nop", trunc: true},
		{name: "OddLimit", limit: 5, writes: []string{"abcdefgh"}, head: "abc", tail: "gh", trunc: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCapture(tt.limit)
			var all []byte
			for _, w := range tt.writes {
				n, err := c.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
				all = append(all, w...)
			}
			o := c.output()
			require.Equal(t, tt.head, string(o.Head))
			require.Equal(t, tt.tail, string(o.Tail))
			require.Equal(t, tt.trunc, o.Truncated)
			require.EqualValues(t, len(all), o.Total)
			if !tt.trunc {
				require.True(t, bytes.Equal(all, o.Bytes()))
			}
		})
	}
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	want := Response{ID: 7, Op: OpRunResult, Run: &RunResult{Steps: []StepResult{{
		Name: "run", Started: true, Stdout: Output{Head: []byte{0, 0xff, 0xfe}, Total: 3},
	}}}}
	require.NoError(t, enc.Encode(want))
	require.NoError(t, enc.Encode(Request{ID: 8, Op: OpPing}))
	dec := NewDecoder(&buf)
	var got Response
	require.NoError(t, dec.Decode(&got))
	require.Equal(t, want, got)
	var req Request
	require.NoError(t, dec.Decode(&req))
	require.Equal(t, Request{ID: 8, Op: OpPing}, req)
	require.Error(t, dec.Decode(&req))
}
