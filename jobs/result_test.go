package jobs_test

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

func TestHead(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abcd", 2, "ab"},
		{"aé", 2, "a"},                // é is 2 bytes: byte 2 is its second
		{"aé", 3, "aé"},               // whole
		{"a€b", 2, "a"},               // € is 3 bytes
		{"a€b", 3, "a"},               // still inside €
		{"a€b", 4, "a€"},              // just after it
		{"a😀", 4, "a"},                // 4-byte character, cut at its last byte
		{"\uFFFD\uFFFD", 4, "\uFFFD"}, // a real U+FFFD is a character like any other
		{"ab\xbf\xbfcd", 3, "ab\xbf"}, // not UTF-8: cut where asked
		{"\xe2\x82", 1, "\xe2"},       // a truncated character is not one: cut where asked
		{"é", 0, ""},
	} {
		got := jobs.Head(c.s, c.n)
		require.Equal(t, c.want, got, "Head(%q, %d)", c.s, c.n)
		require.Equal(t, c.want, string(jobs.Head([]byte(c.s), c.n)), "Head([]byte(%q), %d)", c.s, c.n)
		if utf8.ValidString(c.s) {
			require.True(t, utf8.ValidString(got), "Head(%q, %d) = %q", c.s, c.n, got)
		}
	}
}
