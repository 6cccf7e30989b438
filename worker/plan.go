package worker

import (
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Limits are a job's limits in the sandbox's terms: what is fixed when its
// container is created (part of the pool key) and what each step gets.
type Limits struct {
	Container sandbox.ContainerLimits
	// Timeout is the run step's wall-clock limit.
	Timeout time.Duration
	// OutputBytes is kept of each stream of each step.
	OutputBytes int
	// Rlimits are each step's process limits.
	Rlimits agent.Rlimits
}

// LimitsOf turns normalized job limits (every field set, as
// [jobs.Policy.Normalize] leaves them) into sandbox limits. It is the one
// place that does: the handler plans every job with it, and warm pools are
// started with it (WarmSpec), so a warm container is the one a job asks
// for.
func LimitsOf(l jobs.Limits) Limits {
	return Limits{
		Container: sandbox.ContainerLimits{
			MemoryBytes:   l.MemoryMB * jobs.MiB,
			NanoCPUs:      int64(l.CPUs * 1e9),
			Pids:          l.Pids,
			WorkDirBytes:  l.DiskMB * jobs.MiB,
			TmpBytes:      l.TmpMB * jobs.MiB,
			NoFile:        uint64(max(l.Nofile, 0)),
			FileSizeBytes: uint64(max(l.FileSizeMB, 0) * jobs.MiB),
		},
		Timeout:     time.Duration(l.TimeoutMS) * time.Millisecond,
		OutputBytes: int(l.OutputBytes),
		// Equal to the container's ulimits, so the agent starts steps
		// directly, without its launcher.
		Rlimits: agent.Rlimits{NoFile: uint64(max(l.Nofile, 0)), FileSize: uint64(max(l.FileSizeMB, 0) * jobs.MiB)},
	}
}

// SpecOf returns the pool key of a normalized job: its language's image
// under imagePrefix, its container limits, tenant and isolation, and the
// volume of its installed library set ("" for none).
func SpecOf(j jobs.Job, imagePrefix, volume string) sandbox.Spec {
	lang, _ := langs.Lookup(j.Lang)
	mode := sandbox.ModeReuse
	if j.Isolation == jobs.IsolationFresh {
		mode = sandbox.ModeFresh
	}
	return sandbox.Spec{
		Image: lang.Image(imagePrefix), Limits: LimitsOf(j.Limits).Container,
		Tenant: j.Tenant, Mode: mode, Volume: volume,
	}
}

// WarmSpec is the pool key of lang's default job under policy: the one a
// job that sets no limits, tenant or isolation runs in. `worker --warm`
// starts these.
func WarmSpec(policy jobs.Policy, lang, imagePrefix string) (sandbox.Spec, bool) {
	if _, ok := langs.Lookup(lang); !ok {
		return sandbox.Spec{}, false
	}
	j := jobs.Job{Lang: lang, Code: "-"}
	policy.Normalize(&j)
	return SpecOf(j, imagePrefix, ""), true
}
