// Package sandbox runs programs in hardened, pre-warmed containers.
//
// It is the only package that talks to a container engine. Open
// (open.go) is the one front door to the engines: a Runtime (docker.go, or
// podman.go built with the Podman tags; gVisor is an OCI runtime under
// either) creates, attaches, starts, removes and lists containers from a
// ContainerSpec (runtime.go), whose ContainerLimits (limits.go) are a
// job's limits as container settings (the worker maps them from the job,
// worker.LimitsOf); a Pool (pool.go) keeps warm containers per Spec
// (image, container limits, tenant, mode, library volume) and hands them
// to jobs, and installs library sets into named volumes (libs.go); a
// Container (container.go) is the session with the agent inside one
// container; labels (labels.go) name every container's owner and pool;
// Reconcile (reconcile.go) removes containers whose owner died.
//
// Every container runs with no network (but for the short-lived install
// containers of library sets, which never run a job's code), a read-only
// rootfs, size-capped
// tmpfs work dir (/work) and /tmp, all capabilities dropped but the
// agent's (AgentCaps, and OOMPinCap and GVisorReadCap where they apply),
// no-new-privileges, a pids limit, a memory limit with swap off, a CPU
// quota, nofile and core ulimits, no host mounts (a library set's named
// volume, read-only, is the one volume) and no host
// environment, and labels naming its owner and pool. Steps run with no
// effective capabilities as the container's own uid, drawn per container
// from a range starting at 1,000,000 (DefaultJobUIDs; a worker splits it
// between its job and session containers), so no two sandboxes share
// per-user kernel limits; only the install containers of library sets run
// as uid 1000.
package sandbox
