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

// tmpfsInodes is the inode count of a tmpfs mount of size bytes (its
// nr_inodes): one per page, at least minTmpfsInodes.
//
// A tmpfs file's data is bounded by the mount's size, but its inode and
// name are kernel memory the size does not count, and the kernel's default
// inode count is half the host's RAM in pages. Empty files, directories,
// symbolic links and hard links (tmpfs counts each link as an inode: a
// link's name pins kernel memory as a file does) cost no size: a job making
// a million of them held about 700 MB of the kernel's, charged to its
// container. With one inode per page, a file that holds data reaches the
// size first; only files that hold none reach the inode count, and the job
// sees ENOSPC, as it does when the size is full.
//
// Docker's runc applies it. Podman 4.3 refuses the option and gVisor
// ignores it: there the agent's memory watchdog, which charges a job for
// the kernel memory its files hold (agent.TmpfsInodeCost), bounds them.
func tmpfsInodes(size int64) int64 {
	return max(size/4096, minTmpfsInodes)
}

// minTmpfsInodes is the smallest inode count of a tmpfs mount.
const minTmpfsInodes = 1024
