//go:build linux && (amd64 || arm64)

package agent

import (
	"syscall"
	"unsafe"
)

// sysvIPCCount counts the SysV IPC objects of kind (shm, sem, msg) in the
// agent's IPC namespace through the *ctl INFO commands, for kernels without
// /proc/sysvipc: gVisor has none, yet its SysV IPC works, and without
// kernel.shm_rmid_forced there (gVisor ignores the sysctl) even a segment
// nobody attached outlives the job that made it. ok is false when the
// kernel does not answer.
//
// The counts: SEM_INFO's semusz and MSG_INFO's msgpool are the numbers of
// sets and queues, in Linux and in gVisor. SHM_INFO's used_ids is not a
// count in gVisor (its last ID ever used), so shm is counted by shm_tot,
// the pages of all segments: a segment has at least one.
func sysvIPCCount(kind string) (n int64, ok bool) {
	const (
		shmInfo = 14 // SHM_INFO
		semInfo = 19 // SEM_INFO
		msgInfo = 12 // MSG_INFO
	)
	var errno syscall.Errno
	switch kind {
	case "shm":
		var info struct {
			usedIDs                                        int32
			_                                              int32
			shmTot, shmRss, shmSwp, swapAttempts, swapSucc uint64
		}
		_, _, errno = syscall.RawSyscall(syscall.SYS_SHMCTL, 0, shmInfo, uintptr(unsafe.Pointer(&info)))
		n = int64(info.shmTot)
	case "sem":
		var info [10]int32 // struct seminfo; semusz is the 8th
		_, _, errno = syscall.RawSyscall6(syscall.SYS_SEMCTL, 0, 0, semInfo, uintptr(unsafe.Pointer(&info)), 0, 0)
		n = int64(info[7])
	case "msg":
		var info [8]int32 // struct msginfo; msgpool is the 1st
		_, _, errno = syscall.RawSyscall(syscall.SYS_MSGCTL, 0, msgInfo, uintptr(unsafe.Pointer(&info)))
		n = int64(info[0])
	default:
		return 0, false
	}
	return n, errno == 0
}
