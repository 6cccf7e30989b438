package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidGlob(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"*.csv", "out/**", "a/b/*.png"} {
		require.NoError(t, ValidGlob(ok), ok)
	}
	for bad, msg := range map[string]string{
		"":        "relative",
		"/etc/*":  "relative",
		"../x":    `segment ".."`,
		"a//b":    `segment ""`,
		"[":       "syntax",
		"./a.csv": `segment "."`,
	} {
		require.ErrorContains(t, ValidGlob(bad), msg, bad)
	}
}
