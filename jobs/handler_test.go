package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/langs"
)

func TestLangDefaults(t *testing.T) {
	t.Parallel()
	l := Limits{MemoryMB: 0, Pids: 64}
	langDefaults(&l, langs.Limits{MemoryMB: 512, Pids: 256, TimeoutMS: 0})
	require.Equal(t, Limits{MemoryMB: 512, Pids: 64}, l, "the job's own value wins; zero overrides nothing")

	p := Policy{MaxLimits: Limits{MemoryMB: 300}}
	j := Job{Lang: "cpp", Code: "int main(){}", Limits: l}
	p.Normalize(&j)
	require.EqualValues(t, 300, j.Limits.MemoryMB, "the operator's cap bounds a language default")
}
