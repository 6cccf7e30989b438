package jobs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

func TestValidateSession(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{})
	require.Equal(t, []string{"bash", "javascript", "python", "r"}, p.SessionLangs())
	for _, tc := range []struct {
		spec  jobs.SessionSpec
		field string
	}{
		{jobs.SessionSpec{Lang: "cobol"}, "lang"},
		{jobs.SessionSpec{Lang: "go"}, "lang"},
		{jobs.SessionSpec{Lang: "python", ID: "../x"}, "id"},
		{jobs.SessionSpec{Lang: "python", Limits: jobs.Limits{MemoryMB: 1 << 20}}, "limits.memory_mb"},
		{jobs.SessionSpec{Lang: "python", Files: []jobs.File{{Path: "../x"}}}, "files[0].path"},
		{jobs.SessionSpec{Lang: "python", Files: []jobs.File{{Path: "x", Key: "k"}}}, "files[0].key"},
		{jobs.SessionSpec{Lang: "python", LifetimeSeconds: 100000}, "lifetime_seconds"},
		{jobs.SessionSpec{Lang: "python", IdleTTLSeconds: -1}, "idle_ttl_seconds"},
		{jobs.SessionSpec{Lang: "python", Env: map[string]string{"1BAD": "x"}}, "env"},
	} {
		err := p.ValidateSession(&tc.spec)
		var ve *jobs.ValidationError
		require.ErrorAs(t, err, &ve, "%+v", tc.spec)
		require.Contains(t, ve.Field, tc.field, ve.Error())
	}
	spec := jobs.SessionSpec{Lang: "py"}
	require.NoError(t, p.ValidateSession(&spec))
	require.Equal(t, "python", spec.Lang, "an alias becomes the canonical name")
	require.Equal(t, 600, spec.IdleTTLSeconds)
	require.Equal(t, 3600, spec.LifetimeSeconds)
	for _, p := range []string{"../a", "/etc", "a/../../b", "a\x00b"} {
		require.Error(t, jobs.ValidSessionPath(p, false), p)
	}
	require.NoError(t, jobs.ValidSessionPath("", true))
	require.Error(t, jobs.ValidSessionPath("", false))
	require.NoError(t, jobs.ValidSessionPath("a/b.txt", false))
}
