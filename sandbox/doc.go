// Package sandbox runs programs in hardened, pre-warmed containers.
//
// It is the only package that talks to a container engine. A Runtime
// (docker.go, or podman.go built with the Podman tags) creates, attaches, starts, removes and lists containers; a
// Pool (pool.go) keeps warm containers per Spec (image, container limits,
// tenant, mode, library volume) and hands them to jobs, and installs
// library sets into named volumes (libs.go); a Container (container.go) is the
// session with the agent inside one container; Policy (limits.go) turns a
// job's limits into effective ones under operator caps; Reconcile
// (reconcile.go) removes containers whose owner died.
//
// Every container runs with no network (but for the short-lived install
// containers of library sets, which never run a job's code), a read-only
// rootfs, size-capped
// tmpfs work dir (/work) and /tmp, all capabilities dropped but the
// agent's six, no-new-privileges, a pids limit, a memory limit with swap
// off, a CPU quota, nofile and core ulimits, no host mounts (a library
// set's named volume, read-only, is the one volume) and no host
// environment, and labels naming its owner and pool. Steps run as uid 1000
// with no effective capabilities.
package sandbox
