package jobs

import "strconv"

// Limits caps the resources of one run. Every field's zero value means
// "the default": the job's language's own default where it has one
// ([Language.Limits]), else the operator's ([Policy.DefaultLimits]). A job
// may lower a limit below the default but never raise it above the
// operator's cap ([Policy.MaxLimits]) nor set it below its minimum.
//
// The defaults, caps and minimums of every field are one table,
// [LimitTable]; the worker turns a job's limits into container settings
// and step limits in one function (worker.LimitsOf).
type Limits struct {
	// TimeoutMS is the wall-clock limit of the run step, in milliseconds.
	// Default 10 000 (10 s), cap 300 000 (5 min). A compile step gets the
	// same budget again.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`

	// MemoryMB is the memory the job's processes may use, in MiB, swap
	// off. Default 256, cap 4096, minimum 16. Files in the tmpfs mounts
	// (DiskMB, TmpMB) are budgeted apart, and the agent has its own share:
	// the container's limit is their sum (worker.LimitsOf).
	MemoryMB int64 `json:"memory_mb,omitempty"`

	// CPUs is the CPU quota in cores, fractions allowed. Default 1, cap 4,
	// minimum 0.1 (the agent shares the quota).
	CPUs float64 `json:"cpus,omitempty"`

	// Pids caps the number of processes and threads. Default 128, cap 512,
	// minimum 8.
	Pids int64 `json:"pids,omitempty"`

	// OutputBytes caps what is kept of each of stdout and stderr, in bytes
	// (head and tail are kept, the middle is dropped and the result marked
	// truncated). Default 1 MiB, cap 16 MiB.
	OutputBytes int64 `json:"output_bytes,omitempty"`

	// DiskMB is the size of the work dir tmpfs in MiB. Default 256, cap
	// 1024, minimum 4.
	DiskMB int64 `json:"disk_mb,omitempty"`

	// TmpMB is the size of the /tmp tmpfs (and of /dev/shm) in MiB.
	// Default 64, cap 1024, minimum 4.
	TmpMB int64 `json:"tmp_mb,omitempty"`

	// Nofile is the open-file-descriptor limit (RLIMIT_NOFILE). Default
	// 256, cap 4096, minimum 32.
	Nofile int64 `json:"nofile,omitempty"`

	// FileSizeMB is the largest file the program may write (RLIMIT_FSIZE),
	// in MiB. Default 64, cap 1024.
	FileSizeMB int64 `json:"file_size_mb,omitempty"`

	// CPUMS is the CPU time of each test case of a judged job, in
	// milliseconds (user and system, every process of the case): a case
	// past it is time_limit. Default 2 000, cap 60 000. Jobs without tests
	// are bounded by timeout_ms alone.
	CPUMS int64 `json:"cpu_ms,omitempty"`
}

// Limit is one row of [LimitTable]: a field of [Limits] with its built-in
// default, cap and minimum. Values are float64 so that one row type serves
// the integer fields and cpus; every integer limit is far below 2^53.
type Limit struct {
	// Name is the field's JSON name, as in "limits.<Name>".
	Name string
	// Unit is how the value is counted, for messages ("MiB", "ms").
	Unit string
	// Default is the built-in default, Cap the built-in operator cap.
	Default, Cap float64
	// Min is the smallest non-zero value a job may ask for.
	Min float64
	// Get and Set read and write the field.
	Get func(*Limits) float64
	Set func(*Limits, float64)
}

func intLimit(name, unit string, def, capv, minv int64, f func(*Limits) *int64) Limit {
	return Limit{
		Name: name, Unit: unit, Default: float64(def), Cap: float64(capv), Min: float64(minv),
		Get: func(l *Limits) float64 { return float64(*f(l)) },
		Set: func(l *Limits, v float64) { *f(l) = int64(v) },
	}
}

// LimitTable holds every limit a job may set, with its built-in default,
// cap and minimum. It is the one place these numbers live: validation,
// defaults, the README's table and the worker's container settings all
// follow it. Adding a limit is a field in [Limits], a row here and its
// mapping in worker.LimitsOf (see CONTRIBUTING.md).
var LimitTable = []Limit{
	intLimit("timeout_ms", "ms", 10_000, 300_000, 1, func(l *Limits) *int64 { return &l.TimeoutMS }),
	intLimit("memory_mb", "MiB", 256, 4096, 16, func(l *Limits) *int64 { return &l.MemoryMB }),
	{
		Name: "cpus", Unit: "cores", Default: 1, Cap: 4, Min: 0.1,
		Get: func(l *Limits) float64 { return l.CPUs },
		Set: func(l *Limits, v float64) { l.CPUs = v },
	},
	intLimit("pids", "processes", 128, 512, 8, func(l *Limits) *int64 { return &l.Pids }),
	intLimit("output_bytes", "bytes", 1*MiB, 16*MiB, 1, func(l *Limits) *int64 { return &l.OutputBytes }),
	intLimit("disk_mb", "MiB", 256, 1024, 4, func(l *Limits) *int64 { return &l.DiskMB }),
	intLimit("tmp_mb", "MiB", 64, 1024, 4, func(l *Limits) *int64 { return &l.TmpMB }),
	intLimit("nofile", "files", 256, 4096, 32, func(l *Limits) *int64 { return &l.Nofile }),
	intLimit("file_size_mb", "MiB", 64, 1024, 1, func(l *Limits) *int64 { return &l.FileSizeMB }),
	intLimit("cpu_ms", "ms", 2_000, 60_000, 1, func(l *Limits) *int64 { return &l.CPUMS }),
}

// builtinLimits returns the table's defaults (caps false) or caps (true).
func builtinLimits(caps bool) Limits {
	var l Limits
	for _, f := range LimitTable {
		f.Set(&l, map[bool]float64{false: f.Default, true: f.Cap}[caps])
	}
	return l
}

// BuiltinCaps returns the built-in cap of every limit ([LimitTable]'s
// Cap column), as an operator policy without caps of its own has them.
func BuiltinCaps() Limits { return builtinLimits(true) }

// formatNum prints a limit value: integers without a fraction, others as
// short as they go ("0.5").
func formatNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// HeldBytes is what a job holds of its tenant's byte cap from admission
// until its final Result: its task payload and, when it streams, the live
// output it may write while it runs (each of stdout and stderr of the
// compile and run steps, output_bytes each; the built-in default when the
// job sets none). Results themselves are bounded per job by the worker
// (--max-result-bytes) and are not held.
func (j Job) HeldBytes(payload int) int64 {
	n := int64(payload)
	if j.Stream {
		out := j.Limits.OutputBytes
		if out <= 0 {
			out = builtinLimits(false).OutputBytes
		}
		n += 4 * out
	}
	return n
}
