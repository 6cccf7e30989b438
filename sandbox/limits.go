package sandbox

// ContainerLimits are the limits fixed when a container is created: the
// engine's settings, in the engine's units. They are part of the pool key:
// containers are only reused for jobs with the same container limits. The
// worker derives them from a job's limits (worker.LimitsOf); this package
// applies them, one for one, on every backend (hostConfig, podmanSpec).
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
