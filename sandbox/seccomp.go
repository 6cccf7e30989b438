package sandbox

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"slices"
)

//go:embed seccomp.json
var seccompJSON []byte

// seccompHash is the hex SHA-256 of seccomp.json as shipped.
var seccompHash = func() string {
	sum := sha256.Sum256(seccompJSON)
	return hex.EncodeToString(sum[:])
}()

// seccompSecurityOpt is the Docker security option that applies the
// profile: the JSON itself, compacted, as the docker CLI sends
// `--security-opt seccomp=<file>`. The daemon parses it against the
// container's capabilities.
var seccompSecurityOpt = func() string {
	var b bytes.Buffer
	if err := json.Compact(&b, seccompJSON); err != nil {
		panic("sandbox: seccomp.json is not JSON: " + err.Error())
	}
	return "seccomp=" + b.String()
}()

// gvisorMqueueCalls are the POSIX message queue calls, refused under
// gVisor: runsc mounts no mqueue filesystem in the container, so the
// agent's scrub could not see, let alone remove, a queue a job left for
// the next (runc's /dev/mqueue is emptied by the scrub).
var gvisorMqueueCalls = []string{"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr"}

// seccompGVisorOpt is seccompSecurityOpt without gvisorMqueueCalls, and
// with clone3 allowed rather than refused with ENOSYS: runsc ignores a
// rule's errnoRet, so clone3 would fail with EPERM, from which glibc does
// not fall back to clone, and no thread could start. The agent's own
// filter answers clone3 with ENOSYS instead (agent.refuseClone3, on every
// runtime); TestAgentOutOfReach checks that clone3 makes no namespace.
var seccompGVisorOpt = func() string {
	var p map[string]any
	if err := json.Unmarshal(seccompJSON, &p); err != nil {
		panic("sandbox: seccomp.json is not JSON: " + err.Error())
	}
	var rules []any
	for _, r := range p["syscalls"].([]any) {
		rule := r.(map[string]any)
		var names []any
		for _, n := range rule["names"].([]any) {
			if !slices.Contains(gvisorMqueueCalls, n.(string)) {
				names = append(names, n)
			}
		}
		if len(names) == 1 && names[0] == "clone3" {
			continue
		}
		if rule["names"] = names; len(names) > 0 {
			rules = append(rules, rule)
		}
	}
	// The first rule allows unconditionally (TestSeccompProfile).
	first := rules[0].(map[string]any)
	first["names"] = append(first["names"].([]any), "clone3")
	p["syscalls"] = rules
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return "seccomp=" + string(b)
}()

// seccompOptFor is the seccomp security option for a container of the
// OCI runtime: sandq's profile, less the message queue calls on gVisor.
func seccompOptFor(ociRuntime string) string {
	if ociRuntime == gvisorRuntime {
		return seccompGVisorOpt
	}
	return seccompSecurityOpt
}

// SeccompProfile returns sandq's seccomp profile (sandbox/seccomp.json, as
// shipped). Every container runs under it on both backends, instead of the
// engine's default: on Docker through hostConfig's SecurityOpt, on Podman
// through podmanSpec's SeccompProfilePath (see seccomp_podman.go).
//
// Source: moby's default profile, github.com/moby/profiles/seccomp
// v0.2.3 (moby/profiles commit 836ae4d37ef2ec995c77c99fc55f5b5f3af3a897,
// 2026-05-06), which is the profile moby/moby master vendors (moby/moby
// commit b985e2313a8676e18072b442911fc8f64f17d440; moby/moby's own
// profiles/seccomp/default.json moved to that module in a600da91f). The
// file is that default.json, same layout, with only these changes:
//
//   - Removed from every SCMP_ACT_ALLOW rule: io_uring_setup,
//     io_uring_enter, io_uring_register, keyctl, add_key, request_key,
//     userfaultfd, perf_event_open, bpf, unshare and setns. moby already
//     leaves all of them out of its unconditional allow list; they were
//     allowed only by the capability rules, so the CAP_SYS_ADMIN rule lost
//     bpf, perf_event_open, setns and unshare, and the CAP_BPF (bpf) and
//     CAP_PERFMON (perf_event_open) rules, left empty, are gone.
//
//   - clone and clone3 removed from the CAP_SYS_ADMIN rule (the one allow
//     rule that did not check clone's flags), and the three clone rules
//     lost their "excludes": {"caps": ["CAP_SYS_ADMIN"]}, so they hold
//     whatever capabilities a container has: clone is allowed only when its
//     flags have none of CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
//     NEWPID, NEWNET (mask 0x7E020000; on s390 the flags are argument 1),
//     and clone3, whose flags seccomp cannot read, always fails with ENOSYS
//     so that glibc falls back to clone. Those three rules carry a
//     "comment" saying so.
//
//   - setpriority, sched_setaffinity, sched_setattr, sched_setparam and
//     sched_setscheduler left the unconditional allow rule for rules of
//     their own that allow them only when their target (who, pid) is not
//     1: the agent. runc's kernel refuses a job these on the agent anyway
//     (another uid, no CAP_SYS_NICE); gVisor's grants them. Those five
//     rules carry a "comment" saying so.
//
// Nothing else changed: the default action is SCMP_ACT_ERRNO with EPERM
// (defaultErrnoRet 1), and the format (archMap, includes/excludes with
// caps, arches and minKernel, errnoRet) is moby's, which Docker 20.10 and
// Podman 4.3 (containers/common) both load. Whoever updates the profile
// from a newer moby applies the same edits; TestSeccompProfile checks them.
//
// A refused syscall fails with EPERM, but for clone3 (ENOSYS, its rule)
// and syscalls numbered above the highest one the host's libseccomp knows
// (ENOSYS, added by runc). On Podman this replaces containers-common's
// profile, whose refusals are ENOSYS: other refused syscalls now fail with
// EPERM there too, as on Docker. The agent (PID 1, root with AgentCaps)
// runs under the same filter; none of its capabilities unlocks a rule.
func SeccompProfile() []byte { return bytes.Clone(seccompJSON) }
