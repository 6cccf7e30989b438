//go:build linux

package agent

import (
	"fmt"
	"syscall"
	"unsafe"
)

// refuseClone3 installs a seccomp filter on the agent, inherited by every
// process it starts, that answers clone3 with ENOSYS: C libraries then fall
// back to clone, whose flags sandq's seccomp profile can see (clone3's are
// behind a pointer), so a job creates no namespace either way. On runc the
// profile already answers so; gVisor applies the profile's rules with EPERM
// whatever their errnoRet (a failed clone3 that glibc does not retry with
// clone: no thread could start), so its profile allows clone3
// (sandbox.seccompOptFor), and this filter, which gVisor's kernel runs
// with its own errno, does the refusing. The agent itself never calls
// clone3 (Go's os/exec uses clone unless asked for a cgroup).
func refuseClone3() error {
	const (
		bpfLdWAbs  = 0x20 // BPF_LD | BPF_W | BPF_ABS
		bpfJeqK    = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
		bpfRetK    = 0x06 // BPF_RET | BPF_K
		retErrno   = 0x00050000
		retAllow   = 0x7fff0000
		sysClone3  = 435 // the same number on every architecture
		setFilter  = 1   // SECCOMP_SET_MODE_FILTER
		flagTSync  = 1   // SECCOMP_FILTER_FLAG_TSYNC: every thread of the agent
		noNewPrivs = 38  // PR_SET_NO_NEW_PRIVS
	)
	type sockFilter struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	filter := []sockFilter{
		{code: bpfLdWAbs, k: 0}, // seccomp_data.nr
		{code: bpfJeqK, jt: 0, jf: 1, k: sysClone3},
		{code: bpfRetK, k: retErrno | uint32(syscall.ENOSYS)},
		{code: bpfRetK, k: retAllow},
	}
	prog := struct {
		len    uint16
		filter *sockFilter
	}{uint16(len(filter)), &filter[0]}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, noNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("agent: no_new_privs: %w", e)
	}
	if _, _, e := syscall.Syscall(sysSeccomp, setFilter, flagTSync, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("agent: seccomp filter refusing clone3: %w", e)
	}
	return nil
}
