// pyfork.so: the Python fork server of sandq's agent (agent/forkserver_linux.go).
//
// The Python image lists this library in /etc/ld.so.preload, so every dynamically linked process
// there loads it, cold starts and job subprocesses alike. It does nothing unless the process was
// started by the agent as a fork server: file descriptor 3 is then a SOCK_SEQPACKET socket to the
// agent, carrying a first message that starts with MAGIC and names the script. Any other process finds no such socket (the agent starts job programs with
// descriptors 0-2 only) and the library stays out of its way: its fopen calls go straight to libc.
// (The socket's peer credentials are not checked: gVisor reports the reader's own for a socketpair.
// A job that hands its own process such a socket gets a fork server of its own, and nothing more.)
//
// The fork server is started exactly like a cold `python3 main.py` for the next job (same argv,
// env, rlimits, uid, streams, session). CPython initializes as usual and then opens its script
// with fopen: there, instead of opening it, the library tells the agent it is ready and serves
// fork requests. Ahead of each job (after the previous one's scrub) the agent asks for a process;
// the server clones it with CLONE_PARENT, so that its parent is the agent (PID 1), the parent a
// cold start has. The process becomes its own session leader and waits on its own socket. When the job comes, the agent sends it the job's
// stdin, stdout and stderr; it returns from fopen with the job's script, now a regular file in the
// work dir: CPython reads, compiles and runs it as `__main__`, prints tracebacks and exits exactly
// as it would have after a cold start, because from the return of fopen on it is that same code
// path. The server itself runs no code of anyone's after start-up.
//
// Jobs run as the same uid as the server, so it defends itself against them. It is not dumpable
// (no ptrace, /proc/<pid>/mem, process_vm_writev or pidfd_getfd by the job's uid; its /proc files
// belong to root), it blocks every signal but SIGKILL and SIGSTOP (the agent restarts it after
// either), and before every fork it checks that nothing another process of its uid can change
// about it (rlimits through prlimit, nice value, scheduling policy and attributes, CPU affinity,
// I/O priority, pending signals, its name where /proc/<pid>/comm is writable) differs from what it had when it started serving. If anything
// does, it answers "tainted" and exits; the agent starts the job cold and a new server later.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CTL_FD 3
#define MAGIC "sandq-pyfork-1"
#define AGENT_PID 1

// Replies to the agent: a 32-bit status, then a 32-bit PID for REPLY_PID.
enum { REPLY_READY = 1, REPLY_PID = 2, REPLY_ERROR = 3, REPLY_TAINTED = 4 };

static int active;           // started by the agent as a fork server, not yet serving
static char script[4096];    // the path CPython opens its script by (absolute)
static char workdir[4096];   // the job's working directory

// What a process of the same uid can change about another one, and a child inherits.
struct state {
	struct rlimit rl[RLIM_NLIMITS];
	int nice;
	int policy;
	uint32_t attr[14]; // struct sched_attr (56 bytes): policy, flags, nice, priority, runtime, ...
	cpu_set_t cpus;
	int ioprio;
	sigset_t pending;
	char comm[16]; // /proc/<pid>/comm, writable by the uid on gVisor; a child inherits it
};

static void snapshot(struct state *s) {
	memset(s, 0, sizeof *s);
	for (int r = 0; r < RLIM_NLIMITS; r++) {
		getrlimit(r, &s->rl[r]);
	}
	errno = 0;
	s->nice = getpriority(PRIO_PROCESS, 0);
	s->policy = sched_getscheduler(0);
	if (syscall(SYS_sched_getattr, 0, s->attr, sizeof s->attr, 0) != 0) {
		memset(s->attr, 0, sizeof s->attr);
	}
	sched_getaffinity(0, sizeof s->cpus, &s->cpus);
	s->ioprio = (int)syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, 0);
	sigemptyset(&s->pending);
	sigpending(&s->pending);
	prctl(PR_GET_NAME, s->comm, 0, 0, 0);
}

static int same_state(const struct state *a, const struct state *b) {
	if (memcmp(a->rl, b->rl, sizeof a->rl) || a->nice != b->nice || a->policy != b->policy ||
	    memcmp(a->attr, b->attr, sizeof a->attr) || !CPU_EQUAL(&a->cpus, &b->cpus) || a->ioprio != b->ioprio ||
	    memcmp(a->comm, b->comm, sizeof a->comm)) {
		return 0;
	}
	for (int sig = 1; sig < NSIG; sig++) {
		if (sigismember(&b->pending, sig) == 1) {
			return 0;
		}
	}
	return 1;
}

__attribute__((constructor)) static void pyfork_init(void) {
	int type = 0;
	socklen_t len = sizeof type;
	if (getsockopt(CTL_FD, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
		return;
	}
	// MAGIC \0 script \0 workdir \0, already queued by the agent before it started us.
	char buf[sizeof MAGIC + sizeof script + sizeof workdir];
	ssize_t n = recv(CTL_FD, buf, sizeof buf, MSG_DONTWAIT | MSG_PEEK);
	if (n < (ssize_t)sizeof MAGIC || memcmp(buf, MAGIC, sizeof MAGIC) != 0) {
		return;
	}
	n = recv(CTL_FD, buf, sizeof buf, MSG_DONTWAIT);
	if (n <= 0 || buf[n - 1] != 0) {
		return;
	}
	const char *p = buf + sizeof MAGIC, *end = buf + n;
	size_t ls = strnlen(p, end - p);
	if (p + ls >= end || ls == 0 || ls >= sizeof script) {
		return;
	}
	memcpy(script, p, ls + 1);
	p += ls + 1;
	size_t lw = strnlen(p, end - p);
	if (p + lw >= end || lw == 0 || lw >= sizeof workdir) {
		return;
	}
	memcpy(workdir, p, lw + 1);
	active = 1;
}

static void reply(int status, int32_t pid) {
	int32_t m[2] = {status, pid};
	send(CTL_FD, m, sizeof m, MSG_NOSIGNAL);
}

// recv_fds receives one message on fd with up to max descriptors; it returns how many came, or
// -1 on EOF or error. Extra descriptors are closed.
static int recv_fds(int fd, int *fds, int max) {
	char data[8];
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {.iov_base = data, .iov_len = sizeof data};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n;
	do {
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		return -1;
	}
	int nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int *got = (int *)CMSG_DATA(c);
			for (int i = 0; i < k; i++) {
				if (nfds < max) {
					fds[nfds++] = got[i];
				} else {
					close(got[i]);
				}
			}
		}
	}
	if (msg.msg_flags & MSG_CTRUNC) {
		for (int i = 0; i < nfds; i++) {
			close(fds[i]);
		}
		return -1;
	}
	return nfds;
}

// A forked process, the agent's child: made ready for a job ahead of time (the fork is off the
// job's path), then waiting on its socket to the agent for the job's
// stdin, stdout and stderr. It returns 0 when it is the job's
// process, ready to return to CPython.
static int become_job(int sock, const sigset_t *mask) {
	close(CTL_FD);
	if (setsid() < 0) {
		return -1;
	}
	int fds[3];
	if (recv_fds(sock, fds, 3) != 3) {
		return -1;
	}
	close(sock);
	if (getppid() != AGENT_PID) {
		return -1;
	}
	for (int i = 0; i < 3; i++) {
		if (dup2(fds[i], i) < 0) {
			return -1;
		}
	}
	for (int i = 0; i < 3; i++) {
		if (fds[i] > 2) {
			close(fds[i]);
		}
	}
	if (chdir(workdir) != 0) {
		return -1;
	}
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
		return -1;
	}
	return sigprocmask(SIG_SETMASK, mask, NULL);
}

// Where glibc keeps this thread's TID (struct pthread's tid, read by raise, pthread_kill and
// mutexes), and the thread's robust futex list, which the kernel does not carry into a child. A
// process cloned with CLONE_PARENT gets both as glibc's own fork gives them.
static pid_t *tidp;
static void *robust_head;
static size_t robust_len;

// calibrate finds tidp: the one word of this thread's struct pthread that holds its TID in the
// server and the child's in a child of glibc's fork (which has the kernel write it there). It
// returns 0 when found, and the robust list is known.
static int calibrate(void) {
	enum { WORDS = 1536 / sizeof(pid_t) }; // struct pthread is larger; glibc 2.36's tid is within
	pid_t *self = (pid_t *)pthread_self();
	pid_t me = (pid_t)syscall(SYS_gettid);
	if (syscall(SYS_get_robust_list, 0, &robust_head, &robust_len) != 0 || !robust_head) {
		return -1;
	}
	int pp[2];
	if (pipe2(pp, O_CLOEXEC) != 0) {
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		pid_t child = (pid_t)syscall(SYS_gettid);
		int32_t found = -1, n = 0;
		for (int i = 0; i < WORDS; i++) {
			if (self[i] == child) {
				found = i;
				n++;
			}
		}
		if (n != 1) {
			found = -1;
		}
		_exit(write(pp[1], &found, sizeof found) == sizeof found ? 0 : 1);
	}
	close(pp[1]);
	int32_t at = -1;
	if (pid > 0) {
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
		if (read(pp[0], &at, sizeof at) != sizeof at) {
			at = -1;
		}
	}
	close(pp[0]);
	if (at < 0 || at >= WORDS || self[at] != me) {
		return -1;
	}
	tidp = &self[at];
	return 0;
}

// clone_parent forks, as glibc's fork does, a process whose parent is the server's (the agent,
// as after a cold start) instead of the server: one new address space, where forking twice and
// letting the middle process exit took two (under gVisor each costs ~8 ms). The server is
// single-threaded and holds no lock of glibc's here, which is all glibc's fork adds.
static pid_t clone_parent(void) {
	unsigned long flags = CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD;
	// The child TID pointer goes 4th on most architectures and 5th on those with CLONE_BACKWARDS
	// (the TLS argument, unused without CLONE_SETTLS): pass it in both.
	pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, tidp, tidp);
	if (pid == 0) {
		syscall(SYS_set_robust_list, robust_head, robust_len);
	}
	return pid;
}

// serve answers fork requests until the agent closes the socket. Each request brings a socket for
// the new process; the reply is its PID. serve returns only in such a process once it is a job's,
// with 0; the server itself exits when done.
static int serve(void) {
	int ok = calibrate();
	sigset_t all, mask;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &mask);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (ok != 0) {
		reply(REPLY_ERROR, 0); // the agent starts every job cold
		_exit(1);
	}
	struct state start, now;
	snapshot(&start);
	reply(REPLY_READY, 0);
	for (;;) {
		int sock;
		int n = recv_fds(CTL_FD, &sock, 1);
		if (n < 0) {
			_exit(0); // the agent is done with us
		}
		if (n != 1) {
			reply(REPLY_ERROR, 0);
			continue;
		}
		snapshot(&now);
		if (!same_state(&start, &now)) {
			reply(REPLY_TAINTED, 0);
			_exit(1);
		}
		pid_t pid = clone_parent();
		if (pid == 0) {
			if (become_job(sock, &mask) != 0) {
				_exit(127);
			}
			return 0;
		}
		close(sock);
		reply(pid > 0 ? REPLY_PID : REPLY_ERROR, pid > 0 ? pid : 0);
	}
}

typedef FILE *(*fopen_fn)(const char *, const char *);

static FILE *hooked(fopen_fn *real, const char *name, const char *path, const char *mode) {
	if (!*real && !(*real = (fopen_fn)dlsym(RTLD_NEXT, name))) {
		errno = ENOSYS;
		return NULL;
	}
	if (active && path && strcmp(path, script) == 0) {
		active = 0;
		serve(); // returns in a job's process only
	}
	return (*real)(path, mode);
}

static fopen_fn real_fopen, real_fopen64;

FILE *fopen(const char *path, const char *mode) { return hooked(&real_fopen, "fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { return hooked(&real_fopen64, "fopen64", path, mode); }
