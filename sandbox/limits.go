package sandbox

import (
	"cmp"
	"fmt"
	"time"

	"github.com/sandq/sandq/agent"
)

// Limits are what one job may use. Zero fields mean the operator's default.
// A job may lower any limit, never raise it above the operator's cap.
type Limits struct {
	// Timeout is the wall-clock limit of the run step. Default 10 s.
	Timeout time.Duration
	// MemoryBytes is the container's memory limit; swap is off. Default 256 MiB.
	MemoryBytes int64
	// CPUs is the CPU quota in cores. Default 1.
	CPUs float64
	// Pids caps the processes and threads in the container, the agent
	// included. Default 128.
	Pids int64
	// WorkDirBytes sizes the work dir tmpfs. Default 256 MiB.
	WorkDirBytes int64
	// TmpBytes sizes the /tmp and /dev/shm tmpfs. Default 64 MiB.
	TmpBytes int64
	// OutputBytes is kept per stream (head and tail). Default 1 MiB.
	OutputBytes int
	// NoFile is the open-file limit of each step. Default 256.
	NoFile uint64
	// FileSizeBytes is the largest file a step may write. Default 64 MiB.
	FileSizeBytes uint64
}

// DefaultLimits are used for zero fields when the operator sets none.
var DefaultLimits = Limits{
	Timeout:       10 * time.Second,
	MemoryBytes:   256 << 20,
	CPUs:          1,
	Pids:          128,
	WorkDirBytes:  256 << 20,
	TmpBytes:      64 << 20,
	OutputBytes:   1 << 20,
	NoFile:        256,
	FileSizeBytes: 64 << 20,
}

// DefaultCaps are the largest limits a job may ask for when the operator
// sets none.
var DefaultCaps = Limits{
	Timeout:       5 * time.Minute,
	MemoryBytes:   4 << 30,
	CPUs:          4,
	Pids:          1024,
	WorkDirBytes:  1 << 30,
	TmpBytes:      512 << 20,
	OutputBytes:   16 << 20,
	NoFile:        4096,
	FileSizeBytes: 1 << 30,
}

// Policy turns a job's requested limits into effective ones.
type Policy struct {
	// Defaults fill zero fields. Zero fields of Defaults use DefaultLimits.
	Defaults Limits
	// Caps bound every field. Zero fields of Caps use DefaultCaps.
	Caps Limits
}

func (l Limits) or(d Limits) Limits {
	return Limits{
		Timeout:       cmp.Or(l.Timeout, d.Timeout),
		MemoryBytes:   cmp.Or(l.MemoryBytes, d.MemoryBytes),
		CPUs:          cmp.Or(l.CPUs, d.CPUs),
		Pids:          cmp.Or(l.Pids, d.Pids),
		WorkDirBytes:  cmp.Or(l.WorkDirBytes, d.WorkDirBytes),
		TmpBytes:      cmp.Or(l.TmpBytes, d.TmpBytes),
		OutputBytes:   cmp.Or(l.OutputBytes, d.OutputBytes),
		NoFile:        cmp.Or(l.NoFile, d.NoFile),
		FileSizeBytes: cmp.Or(l.FileSizeBytes, d.FileSizeBytes),
	}
}

// LimitError names a limit that is negative or above its cap.
type LimitError struct {
	Limit string
	Value string
	Cap   string
}

func (e *LimitError) Error() string {
	if e.Cap == "" {
		return fmt.Sprintf("sandbox: limit %s = %s is negative", e.Limit, e.Value)
	}
	return fmt.Sprintf("sandbox: limit %s = %s is above the operator cap %s", e.Limit, e.Value, e.Cap)
}

// Effective fills req's zero fields from the defaults and checks every
// field against the caps. Defaults above the caps are lowered to them.
func (p Policy) Effective(req Limits) (Limits, error) {
	caps := p.Caps.or(DefaultCaps)
	def := p.Defaults.or(DefaultLimits)
	l := req.or(def.clamp(caps))
	type check struct {
		name       string
		bad, above bool
		val, cap   any
	}
	for _, c := range []check{
		{"timeout", l.Timeout < 0, l.Timeout > caps.Timeout, l.Timeout, caps.Timeout},
		{"memory", l.MemoryBytes < 0, l.MemoryBytes > caps.MemoryBytes, l.MemoryBytes, caps.MemoryBytes},
		{"cpus", l.CPUs < 0, l.CPUs > caps.CPUs, l.CPUs, caps.CPUs},
		{"pids", l.Pids < 0, l.Pids > caps.Pids, l.Pids, caps.Pids},
		{"work_dir_bytes", l.WorkDirBytes < 0, l.WorkDirBytes > caps.WorkDirBytes, l.WorkDirBytes, caps.WorkDirBytes},
		{"tmp_bytes", l.TmpBytes < 0, l.TmpBytes > caps.TmpBytes, l.TmpBytes, caps.TmpBytes},
		{"output_bytes", l.OutputBytes < 0, l.OutputBytes > caps.OutputBytes, l.OutputBytes, caps.OutputBytes},
		{"nofile", false, l.NoFile > caps.NoFile, l.NoFile, caps.NoFile},
		{"file_size_bytes", false, l.FileSizeBytes > caps.FileSizeBytes, l.FileSizeBytes, caps.FileSizeBytes},
	} {
		if c.bad {
			return Limits{}, &LimitError{Limit: c.name, Value: fmt.Sprint(c.val)}
		}
		if c.above {
			return Limits{}, &LimitError{Limit: c.name, Value: fmt.Sprint(c.val), Cap: fmt.Sprint(c.cap)}
		}
	}
	return l, nil
}

func (l Limits) clamp(c Limits) Limits {
	return Limits{
		Timeout:       min(l.Timeout, c.Timeout),
		MemoryBytes:   min(l.MemoryBytes, c.MemoryBytes),
		CPUs:          min(l.CPUs, c.CPUs),
		Pids:          min(l.Pids, c.Pids),
		WorkDirBytes:  min(l.WorkDirBytes, c.WorkDirBytes),
		TmpBytes:      min(l.TmpBytes, c.TmpBytes),
		OutputBytes:   min(l.OutputBytes, c.OutputBytes),
		NoFile:        min(l.NoFile, c.NoFile),
		FileSizeBytes: min(l.FileSizeBytes, c.FileSizeBytes),
	}
}

// ContainerLimits are the limits fixed when a container is created. They
// are part of the pool key: containers are only reused for jobs with the
// same container limits.
type ContainerLimits struct {
	MemoryBytes  int64
	NanoCPUs     int64
	Pids         int64
	WorkDirBytes int64
	TmpBytes     int64
	// NoFile and FileSizeBytes are the container's ulimits, the agent's
	// and so every step's. The agent needs only a few descriptors.
	NoFile        uint64
	FileSizeBytes uint64
}

// Container returns the part of l fixed at container creation.
func (l Limits) Container() ContainerLimits {
	return ContainerLimits{
		MemoryBytes:   l.MemoryBytes,
		NanoCPUs:      int64(l.CPUs * 1e9),
		Pids:          l.Pids,
		WorkDirBytes:  l.WorkDirBytes,
		TmpBytes:      l.TmpBytes,
		NoFile:        l.NoFile,
		FileSizeBytes: l.FileSizeBytes,
	}
}

// Rlimits returns the per-step process limits. They equal the container's
// ulimits, so the agent starts steps directly (no launcher).
func (l Limits) Rlimits() agent.Rlimits {
	return agent.Rlimits{NoFile: l.NoFile, FileSize: l.FileSizeBytes}
}
