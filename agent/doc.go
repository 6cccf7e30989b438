// Package agent is the program that runs as PID 1 inside every sandbox
// container, and the framed protocol the worker uses to talk to it.
//
// Why an agent: `docker exec` costs tens of milliseconds of CPU per call
// and `docker run` hundreds; a warm container whose init process forks the
// job directly costs little more than the fork itself. The worker speaks to
// the agent over the container's attached stdin and stdout, so no network,
// socket or bind mount is needed and it works against a remote engine and
// under Podman alike.
//
// Protocol: each message is a frame, a 4-byte big-endian length followed by
// that many bytes of JSON (Request from the worker, Response from the
// agent); a message's bulk bytes (an artifact's, an output chunk's, an
// egress frame's or a session file's data) follow its JSON raw, with a
// second length (see Encoder). The agent writes Ready first. Requests are served one at a time,
// except cancel and ping, which are answered while a run is in progress.
// When its stdin reaches EOF (the worker died or detached) the agent kills
// every process and exits, which stops the container.
//
// Per job the agent writes input files into the work dir (never outside
// it), runs each step as an unprivileged uid in its own session with
// rlimits and a raised oom_score_adj, enforces the wall timeout, kills every
// process but itself afterwards, and reports exit code, signal, timeout,
// OOM kill (from the cgroup's oom_kill counter, or under gVisor from its own
// memory watchdog; never inferred from exit code 137), wall and CPU time,
// peak RSS, and head and tail of each output stream. Between jobs it scrubs
// the container and proves it clean: no process but itself, empty writable
// mounts, no SysV IPC objects.
//
// The agent uses the standard library only and is built without cgo, so
// one static binary serves every image.
package agent
