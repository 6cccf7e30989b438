package agent

import "syscall"

// System call numbers the syscall package names differently, or not at all,
// per architecture.
const (
	sysFstatat = syscall.SYS_FSTATAT
	sysSeccomp = syscall.SYS_SECCOMP
)
