package sandbox

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-units"
	"github.com/rs/zerolog"
)

// AgentCaps are the only capabilities a sandbox container keeps. They are
// the agent's: setuid/setgid to start steps as the job uid, kill to end
// them, and chown/dac_override/fowner to write input files for the job uid
// and to empty the writable mounts whatever modes the job set. Steps run as
// a non-root uid, so their effective set is empty.
var AgentCaps = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}

// OOMPinCap is added to AgentCaps when ContainerSpec.PinOOM is set: with
// it the agent sets its own oom_score_adj to -1000 and pins every step's
// at 1000 (a privileged write also sets the floor the step may not go
// below), so the OOM killer always takes the job, never the agent. An
// engine whose own root lacks it (a nested container) cannot grant it;
// the pool then starts containers without it (Pool.PinsOOM).
const OOMPinCap = "SYS_RESOURCE"

// GVisorReadCap is added to AgentCaps under gVisor: with it the agent's
// memory watchdog reads the smaps of the job's processes (another uid's),
// whose anonymous memory holds the job to its own limit before gVisor's
// meminfo shows it (agent's Usage under gVisor). It is the capability of
// gVisor's kernel, not the host's, and the agent's alone: a step runs as
// the job uid with an empty effective and permitted set and
// no-new-privileges. It gives the agent nothing over the job it lacked:
// with SETUID it could already become the job uid and trace the job's
// processes as their owner.
const GVisorReadCap = "SYS_PTRACE"

// agentCaps is the capability set of a container of spec.
func agentCaps(spec ContainerSpec) []string {
	caps := AgentCaps
	if spec.PinOOM {
		caps = append(slices.Clone(caps), OOMPinCap)
	}
	if spec.OCIRuntime == gvisorRuntime {
		caps = append(slices.Clone(caps), GVisorReadCap)
	}
	return caps
}

// DefaultJobUIDs is the range job uids are drawn from: each container's
// steps run as a uid of their own, so per-uid kernel limits (inotify
// instances, pipe buffers, mqueue bytes, keyrings, RLIMIT_NPROC) are not
// shared between sandboxes nor with the host's users. It lies above the
// subordinate uid ranges Debian gives users (100000 + 65536n for the first
// few) and below 2^31.
var DefaultJobUIDs = [2]int{1_000_000, 1_065_535}

// agentArgs is the agent's command line for a container: its job uid, and
// how long it keeps a prestarted interpreter unused.
func agentArgs(spec ContainerSpec) []string {
	args := []string{"--job-uid", strconv.Itoa(spec.JobUID)}
	switch {
	case spec.PrestartHold < 0:
		args = append(args, "--prestart-hold", "0")
	case spec.PrestartHold > 0:
		args = append(args, "--prestart-hold", spec.PrestartHold.String())
	}
	return args
}

// DockerConfig configures the Docker runtime.
type DockerConfig struct {
	// Host is the engine address, e.g. unix:///var/run/docker.sock or
	// tcp://host:2376. Default: DOCKER_HOST and the other DOCKER_*
	// variables, else the local socket.
	Host string
	// Logger receives the agents' stderr. Default: discard.
	Logger zerolog.Logger
}

// Docker is the Runtime on the Docker Engine API.
type Docker struct {
	cli       *client.Client
	log       zerolog.Logger
	negotiate sync.Once
}

var _ Runtime = (*Docker)(nil)

// NewDocker connects to the engine, negotiating the API version.
func NewDocker(cfg DockerConfig) (*Docker, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("sandbox: docker client: %w", err)
	}
	d := &Docker{cli: cli, log: cfg.Logger}
	// Settle the API version now, before any concurrent use (see Ping); an
	// engine that does not answer yet leaves it to Ping or the first call.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err == nil {
		d.negotiate.Do(func() { cli.NegotiateAPIVersion(ctx) })
	}
	return d, nil
}

// Ping checks that the engine answers, and settles the client's API
// version. The client negotiates it lazily on its first request, and some
// calls (VolumeList) read it without negotiating: negotiated here, in
// Open, before any concurrent use, no call races the negotiation.
func (d *Docker) Ping(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx); err != nil {
		return fmt.Errorf("sandbox: docker ping: %w", err)
	}
	d.negotiate.Do(func() { d.cli.NegotiateAPIVersion(ctx) })
	return nil
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.cli.Close() }

// Name implements Runtime.
func (d *Docker) Name() string { return "docker" }

// gVisor (runsc) is the OCI runtime that runs containers in a user-space
// kernel. The pids cgroup counts its host tasks (the sentry's threads and a
// stub per application process (systrap's, or ptrace's): about 40 at rest and 5 or 6 per
// process, more under a fork bomb: 16 per process leaves room), so a runsc
// container's pids limit leaves room for them, and
// the job's own process limit is RLIMIT_NPROC, which gVisor enforces
// inside the sandbox (every container's job uid is its own).
const gvisorRuntime = "runsc"

// pidsLimit is the container's pids cgroup limit.
func pidsLimit(spec ContainerSpec) int64 {
	if spec.OCIRuntime == gvisorRuntime {
		return spec.Limits.Pids*16 + 512
	}
	return spec.Limits.Pids
}

// nprocLimit is the container's RLIMIT_NPROC under gVisor, 0 elsewhere.
func nprocLimit(spec ContainerSpec) uint64 {
	if spec.OCIRuntime == gvisorRuntime {
		return uint64(spec.Limits.Pids)
	}
	return 0
}

// hostConfig maps a spec to the engine's settings. Everything here is
// hardening; nothing can be loosened by a spec.
func hostConfig(spec ContainerSpec) *container.HostConfig {
	l := spec.Limits
	tmpfs := func(size int64, extra string) string {
		return fmt.Sprintf("rw,nosuid,nodev,exec,size=%d,nr_inodes=%d%s", size, tmpfsInodes(size), extra)
	}
	network := container.NetworkMode("none")
	if spec.Network {
		network = "bridge"
	}
	mounts := agentMount(spec)
	if spec.Volume != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: spec.Volume, Target: LibsDir, ReadOnly: !spec.VolumeWritable})
	}
	pids := pidsLimit(spec)
	ulimits := []*units.Ulimit{
		{Name: "nofile", Soft: int64(l.NoFile), Hard: int64(l.NoFile)},
		{Name: "fsize", Soft: int64(l.FileSizeBytes), Hard: int64(l.FileSizeBytes)},
		{Name: "core", Soft: 0, Hard: 0},
	}
	if n := nprocLimit(spec); n > 0 {
		ulimits = append(ulimits, &units.Ulimit{Name: "nproc", Soft: int64(n), Hard: int64(n)})
	}
	return &container.HostConfig{
		NetworkMode:    network,
		Mounts:         mounts,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         agentCaps(spec),
		SecurityOpt:    []string{"no-new-privileges", seccompOptFor(spec.OCIRuntime)}, // sandq's profile (seccomp.go)
		Tmpfs: map[string]string{
			"/work": tmpfs(l.WorkDirBytes, fmt.Sprintf(",uid=%d,gid=%d,mode=0700", spec.JobUID, spec.JobUID)),
			"/tmp":  tmpfs(l.TmpBytes, ",mode=1777"),
			// Docker's own /dev/shm of a private IPC namespace takes a size
			// (ShmSize) but no inode count: ours replaces it.
			"/dev/shm": tmpfs(l.TmpBytes, ",mode=1777"),
		},
		IpcMode: "private",
		// Shared memory segments die with the last process attached, so a
		// killed job cannot leave one behind.
		Sysctls:    map[string]string{"kernel.shm_rmid_forced": "1"},
		LogConfig:  container.LogConfig{Type: "none"},
		AutoRemove: false,
		Runtime:    spec.OCIRuntime,
		Resources: container.Resources{
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes, // equal to Memory: no swap
			NanoCPUs:   l.NanoCPUs,
			CpusetCpus: spec.CPUSet,
			PidsLimit:  &pids,
			Ulimits:    ulimits,
		},
	}
}

// Create implements Runtime.
func (d *Docker) Create(ctx context.Context, spec ContainerSpec) (string, error) {
	cfg := &container.Config{
		Image:           spec.Image,
		Cmd:             agentArgs(spec),
		User:            "0:0",
		WorkingDir:      "/work",
		Hostname:        "sandbox",
		Labels:          spec.Labels,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
		OpenStdin:       true,
		StdinOnce:       true, // the agent sees EOF when the owner detaches or dies
		Tty:             false,
		Env:             nil, // the image's only: never the host's
		NetworkDisabled: !spec.Network,
	}
	foreignConfig(spec, cfg)
	resp, err := d.cli.ContainerCreate(ctx, cfg, hostConfig(spec), nil, nil, spec.Name)
	if err != nil {
		return "", fmt.Errorf("sandbox: create container: %w", err)
	}
	return resp.ID, nil
}

type dockerStream struct {
	conn   io.WriteCloser
	closer func()
	out    *io.PipeReader
}

func (s *dockerStream) Read(p []byte) (int, error)  { return s.out.Read(p) }
func (s *dockerStream) Write(p []byte) (int, error) { return s.conn.Write(p) }
func (s *dockerStream) Close() error {
	s.closer()
	return s.out.Close()
}

// agentLog writes the agent's stderr lines to the logger.
type agentLog struct {
	log zerolog.Logger
	id  string
}

func (a agentLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		a.log.Warn().Str("container_id", shortID(a.id)).Str("agent_stderr", line).Msg("agent")
	}
	return len(p), nil
}

// Attach implements Runtime. The stream is multiplexed (no TTY, so binary
// frames pass untouched); stdout is demultiplexed into the Stream.
func (d *Docker) Attach(ctx context.Context, id string) (Stream, error) {
	hj, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: attach: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, agentLog{d.log, id}, hj.Reader)
		pw.CloseWithError(cmpErr(err, io.EOF))
	}()
	return &dockerStream{conn: hj.Conn, closer: hj.Close, out: pr}, nil
}

func cmpErr(err, def error) error {
	if err == nil {
		return def
	}
	return err
}

// Start implements Runtime.
func (d *Docker) Start(ctx context.Context, id string) error {
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("sandbox: start container: %w", err)
	}
	return nil
}

// Remove implements Runtime.
func (d *Docker) Remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		// Someone else is removing it: wait until it is gone, so that
		// success always means the container no longer exists.
		waitCh, errCh := d.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
		select {
		case <-waitCh:
			return nil
		case err := <-errCh:
			if cerrdefs.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("sandbox: wait for removal: %w", err)
		}
	}
	return fmt.Errorf("sandbox: remove container: %w", err)
}

// State implements Runtime.
func (d *Docker) State(ctx context.Context, id string) (ContainerState, error) {
	ins, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		return ContainerState{}, fmt.Errorf("sandbox: inspect container: %w", err)
	}
	if ins.State == nil {
		return ContainerState{}, nil
	}
	return ContainerState{Running: ins.State.Running, OOMKilled: ins.State.OOMKilled, ExitCode: ins.State.ExitCode}, nil
}

// List implements Runtime.
func (d *Docker) List(ctx context.Context, labels map[string]string) ([]ContainerInfo, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("sandbox: list containers: %w", err)
	}
	out := make([]ContainerInfo, 0, len(cs))
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, ContainerInfo{
			ID: c.ID, Name: name, Labels: c.Labels, State: string(c.State),
			Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// formatBytes is used in pool names: 268435456 -> "256m".
func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + "m"
	}
	return strconv.FormatInt(n, 10)
}

// CreateVolume implements Runtime.
func (d *Docker) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	// The engine answers an existing name with that volume: a success.
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Driver: "local", Labels: labels}); err != nil {
		return fmt.Errorf("sandbox: create volume %s: %w", name, err)
	}
	return nil
}

// RemoveVolume implements Runtime.
func (d *Docker) RemoveVolume(ctx context.Context, name string, force bool) error {
	if err := d.cli.VolumeRemove(ctx, name, force); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("sandbox: remove volume %s: %w", name, err)
	}
	return nil
}

// ListVolumes implements Runtime.
func (d *Docker) ListVolumes(ctx context.Context, labels map[string]string) ([]VolumeInfo, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, fmt.Errorf("sandbox: list volumes: %w", err)
	}
	out := make([]VolumeInfo, 0, len(resp.Volumes))
	for _, v := range resp.Volumes {
		created, _ := time.Parse(time.RFC3339, v.CreatedAt)
		out = append(out, VolumeInfo{Name: v.Name, Labels: v.Labels, Created: created})
	}
	return out, nil
}

// ImageID implements Runtime.
func (d *Docker) ImageID(ctx context.Context, image string) (string, error) {
	ins, err := d.cli.ImageInspect(ctx, image)
	if err != nil {
		return "", fmt.Errorf("sandbox: inspect image %s: %w", image, err)
	}
	return ins.ID, nil
}
