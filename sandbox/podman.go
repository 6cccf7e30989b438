//go:build remote

package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/docker/docker/pkg/stdcopy"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rs/zerolog"
	"github.com/sirupsen/logrus"
)

// PodmanSupported reports whether this binary has the Podman backend: it
// was built with PodmanBuildTags.
const PodmanSupported = true

// Podman is the Runtime on Podman's libpod REST API (`podman system
// service`), through the podman v5 bindings' connection (pkg/bindings:
// dialing unix, tcp or ssh URIs, the API version, error decoding). It
// creates the same containers as Docker: hostConfig's settings, one for
// one, in a libpod SpecGenerator (podmanSpec).
//
// The requests themselves are made here, with the few fields sandq reads
// and writes (podman_api.go), not through the bindings' containers,
// volumes and images packages: those link libpod's entities, specgen and
// with them containers/image, containers/storage and gRPC, which made the
// worker's binary three times the size and its idle RSS 11 MB larger for
// nine calls. TestPodmanAPIMatchesBindings holds the requests to what the
// bindings send.
type Podman struct {
	uri   string
	conn  *bindings.Connection
	log   zerolog.Logger
	nproc uint64
}

var _ Runtime = (*Podman)(nil)

// NewPodman connects to the Podman service at cfg.URI and checks that it
// answers (the bindings ping it).
func NewPodman(cfg PodmanConfig) (*Podman, error) {
	cfg = cfg.WithDefaults()
	// The connection's context carries only values (the client, the
	// service's version); each call brings its own cancellation.
	routeLogrus(cfg.Logger)
	cctx, err := bindings.NewConnection(context.Background(), cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("sandbox: podman connect %s: %w", cfg.URI, err)
	}
	conn, err := bindings.GetClient(cctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: podman connect %s: %w", cfg.URI, err)
	}
	return &Podman{uri: cfg.URI, conn: conn, log: cfg.Logger, nproc: cfg.NProc}, nil
}

var logrusOnce sync.Once

// routeLogrus quiets the bindings' logging. They log through logrus's
// standard logger, in text, to stderr: warnings such as "Failed to close
// STDIN for writing" when an attached container goes away, which are
// expected here (every error that matters is returned). They go to log at
// debug level instead; the first Podman of the process sets it.
func routeLogrus(log zerolog.Logger) {
	logrusOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		logrus.AddHook(logrusHook{log.With().Str("source", "podman-bindings").Logger()})
	})
}

type logrusHook struct{ log zerolog.Logger }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	h.log.Debug().Str("level_logrus", e.Level.String()).Msg(e.Message)
	return nil
}

// Ping checks that the service answers.
func (p *Podman) Ping(ctx context.Context) error {
	if err := p.call(ctx, http.MethodGet, "/_ping", nil, nil, nil); err != nil {
		return fmt.Errorf("sandbox: podman ping: %w", err)
	}
	return nil
}

// Close releases the client's idle connections.
func (p *Podman) Close() error {
	p.conn.Client.CloseIdleConnections()
	return nil
}

// Name implements Runtime.
func (p *Podman) Name() string { return "podman" }

// podmanSpec maps a spec to libpod's settings: hostConfig's, one for one.
// seccompPath is the profile's file on the service's host
// (seccompProfileFile).
func podmanSpec(cs ContainerSpec, nproc uint64, seccompPath string) *podmanSpecGen {
	l := cs.Limits
	yes, no := true, false
	tmpfs := func(dst string, size int64, extra ...string) spec.Mount {
		return spec.Mount{Type: "tmpfs", Source: "tmpfs", Destination: dst,
			Options: append([]string{"rw", "nosuid", "nodev", "exec", fmt.Sprintf("size=%d", size)}, extra...)}
	}
	rlimit := func(typ string, v uint64) spec.POSIXRlimit {
		return spec.POSIXRlimit{Type: typ, Soft: v, Hard: v}
	}
	const period = 100000 // µs; NanoCPUs as Docker converts them
	quota := l.NanoCPUs * period / 1e9
	shm := l.TmpBytes
	s := newPodmanSpecGen(cs.Image)
	s.Name = cs.Name
	s.Command = agentArgs(cs)
	s.Labels = cs.Labels
	s.User = "0:0"
	s.WorkDir = "/work"
	s.Hostname = "sandbox"
	s.Stdin = &yes // with no --leave-stdin-open, conmon closes it when the attach ends: StdinOnce
	s.Terminal = &no
	s.Env = nil // the image's only: never the host's
	s.EnvHost = &no
	s.HTTPProxy = &no
	s.UnsetEnv = []string{"TERM"} // Podman's default TERM=xterm; Docker sets none without a TTY
	s.NetNS = podmanNamespace{NSMode: "none"}
	if cs.Network {
		s.NetNS = podmanNamespace{NSMode: "bridge"} // the default network
	}
	if cs.Volume != "" {
		opt := "ro"
		if cs.VolumeWritable {
			opt = "rw"
		}
		s.Volumes = []*podmanNamedVolume{{Name: cs.Volume, Dest: LibsDir, Options: []string{opt, "nosuid", "nodev"}}}
	}
	s.ReadOnlyFilesystem = &yes
	s.ReadWriteTmpfs = &no // no writable /run, /var/tmp besides ours
	s.CapDrop = []string{"ALL"}
	s.CapAdd = agentCaps(cs)
	s.NoNewPrivileges = &yes
	s.SeccompProfilePath = seccompPath // sandq's profile (seccomp.go), not containers-common's
	s.Mounts = []spec.Mount{
		// Podman 4.3 refuses tmpfs uid= and gid= ("unknown mount option"):
		// the agent chowns /work to the job uid before it says ready (its first
		// scrub), and proves owner and mode before every job.
		tmpfs("/work", l.WorkDirBytes, "mode=0700"),
		tmpfs("/tmp", l.TmpBytes, "mode=1777"),
	}
	s.IpcNS = podmanNamespace{NSMode: "private"}
	s.ShmSize = &shm
	s.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1"}
	s.LogConfiguration = &podmanLogConfig{Driver: "none"}
	s.OCIRuntime = cs.OCIRuntime
	// The agent (PID 1) ignores SIGTERM: removal kills at once, as
	// Docker's forced removal does, instead of waiting for a stop timeout.
	kill, zero := syscall.SIGKILL, uint(0)
	s.StopSignal, s.StopTimeout = &kill, &zero
	swap := l.MemoryBytes // equal to the limit: no swap
	pids := pidsLimit(cs)
	per := uint64(period)
	s.ResourceLimits = &spec.LinuxResources{
		Memory: &spec.LinuxMemory{Limit: &l.MemoryBytes, Swap: &swap},
		CPU:    &spec.LinuxCPU{Quota: &quota, Period: &per, Cpus: cs.CPUSet},
		Pids:   &spec.LinuxPids{Limit: pids},
	}
	// Names as `podman run --ulimit` takes them: Podman 4.3 prefixes
	// RLIMIT_ itself ("RLIMIT_NOFILE" would become RLIMIT_RLIMIT_NOFILE).
	s.Rlimits = []spec.POSIXRlimit{
		rlimit("nofile", l.NoFile),
		rlimit("fsize", l.FileSizeBytes),
		rlimit("core", 0),
		rlimit("nproc", cmp.Or(nprocLimit(cs), nproc)),
	}
	return s
}

// Create implements Runtime.
func (p *Podman) Create(ctx context.Context, cs ContainerSpec) (string, error) {
	if cs.Agent != "" {
		return "", fmt.Errorf("sandbox: create container: %w", ErrForeignUnsupported)
	}
	seccompPath, err := seccompProfileFile()
	if err != nil {
		return "", err
	}
	var resp podmanCreated
	if err := p.call(ctx, http.MethodPost, "/containers/create", nil, podmanSpec(cs, p.nproc, seccompPath), &resp); err != nil {
		return "", fmt.Errorf("sandbox: create container: %w", err)
	}
	return resp.ID, nil
}

// podmanStream is an attach connection: writes go to the container's
// stdin, reads come from its demultiplexed stdout.
type podmanStream struct {
	conn   io.ReadWriteCloser
	out    *io.PipeReader
	cancel context.CancelFunc
	once   sync.Once
}

func (s *podmanStream) Read(p []byte) (int, error)  { return s.out.Read(p) }
func (s *podmanStream) Write(p []byte) (int, error) { return s.conn.Write(p) }

// Close closes the attach connection: the service ends the attach and
// conmon closes the agent's stdin (StdinOnce).
func (s *podmanStream) Close() error {
	s.once.Do(func() {
		_ = s.conn.Close()
		s.cancel()
		_ = s.out.Close()
	})
	return nil
}

// podmanAttachParams are the attach call's: every stream, and no detach
// keys (an empty detachKeys disables detaching: no byte sequence on stdin
// may end the session). "detachkeys" too, as the bindings send it.
func podmanAttachParams() url.Values {
	return url.Values{"stream": {"true"}, "detachkeys": {""}, "detachKeys": {""},
		"stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
}

// Attach implements Runtime. It must be open before Start: it returns once
// the service has switched protocols. The connection is the HTTP
// client's, upgraded (Go hands over a 101 answer's connection as its
// body), and the stream is multiplexed as Docker's (no TTY).
func (p *Podman) Attach(ctx context.Context, id string) (Stream, error) {
	// The stream outlives this call: its context is ended by Close, or by
	// ctx until the service has answered.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	headers := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"tcp"}}
	resp, err := p.conn.DoRequest(sctx, nil, http.MethodPost, "/containers/%s/attach", podmanAttachParams(), headers, id)
	if !stop() {
		if err == nil {
			resp.Body.Close()
		}
		return nil, fmt.Errorf("sandbox: attach: %w", context.Cause(ctx))
	}
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = resp.Process(nil)
		resp.Body.Close()
		if err == nil {
			err = fmt.Errorf("the service answered %d, not %d", resp.StatusCode, http.StatusSwitchingProtocols)
		}
	}
	var conn io.ReadWriteCloser
	if err == nil {
		var ok bool
		if conn, ok = resp.Body.(io.ReadWriteCloser); !ok {
			resp.Body.Close()
			err = fmt.Errorf("the upgraded connection is a %T", resp.Body)
		}
	}
	if err != nil {
		cancel()
		if isNotFound(err) {
			err = fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		return nil, fmt.Errorf("sandbox: attach: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, agentLog{p.log, id}, bufio.NewReaderSize(conn, 32<<10))
		pw.CloseWithError(cmpErr(err, io.EOF))
	}()
	return &podmanStream{conn: conn, out: pr, cancel: cancel}, nil
}

// Start implements Runtime.
func (p *Podman) Start(ctx context.Context, id string) error {
	if err := p.call(ctx, http.MethodPost, "/containers/%s/start", nil, nil, nil, id); err != nil {
		return fmt.Errorf("sandbox: start container: %w", err)
	}
	return nil
}

func isNotFound(err error) bool {
	var em *errorhandling.ErrorModel
	return errors.As(err, &em) && em.ResponseCode == http.StatusNotFound
}

// Remove implements Runtime. A concurrent removal holds the container's
// lock in the service, so this one returns "no such container" once the
// container is gone: success.
func (p *Podman) Remove(ctx context.Context, id string) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = p.remove(ctx, id)
		// A container whose agent is exiting (its stdin just closed) can
		// be caught between running and stopped: Podman then refuses to
		// kill it ("container state improper"). Moments later it is
		// stopped and removable.
		if err == nil || attempt == 4 || !strings.Contains(err.Error(), "state improper") {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond << attempt):
		case <-ctx.Done():
			return err
		}
	}
}

func (p *Podman) remove(ctx context.Context, id string) error {
	var reports []podmanRemoved
	err := p.call(ctx, http.MethodDelete, "/containers/%s", podmanRemoveParams(), nil, &reports, id)
	if err == nil {
		for _, r := range reports {
			if msg := string(r.Err); msg != "" && msg != "null" && msg != "{}" && !strings.Contains(msg, "no such container") {
				err = errors.New(msg)
			}
		}
	}
	if err == nil || isNotFound(err) {
		return nil
	}
	return fmt.Errorf("sandbox: remove container: %w", err)
}

// State implements Runtime.
func (p *Podman) State(ctx context.Context, id string) (ContainerState, error) {
	var ins podmanInspect
	if err := p.call(ctx, http.MethodGet, "/containers/%s/json", nil, nil, &ins, id); err != nil {
		if isNotFound(err) {
			err = fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		return ContainerState{}, fmt.Errorf("sandbox: inspect container: %w", err)
	}
	if ins.State == nil {
		return ContainerState{}, nil
	}
	return ContainerState{Running: ins.State.Running, OOMKilled: ins.State.OOMKilled, ExitCode: int(ins.State.ExitCode)}, nil
}

// List implements Runtime.
func (p *Podman) List(ctx context.Context, labels map[string]string) ([]ContainerInfo, error) {
	var cs []podmanListed
	if err := p.call(ctx, http.MethodGet, "/containers/json", podmanListParams(labels), nil, &cs); err != nil {
		return nil, fmt.Errorf("sandbox: list containers: %w", err)
	}
	out := make([]ContainerInfo, 0, len(cs))
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		out = append(out, ContainerInfo{ID: c.ID, Name: name, Labels: c.Labels, State: c.State, Created: c.Created})
	}
	return out, nil
}

// volumeExists asks the service (204: it exists; 404: it does not).
func (p *Podman) volumeExists(ctx context.Context, name string) (bool, error) {
	resp, err := p.conn.DoRequest(ctx, nil, http.MethodGet, "/volumes/%s/exists", nil, nil, name)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.IsSuccess(), nil
}

// CreateVolume implements Runtime.
func (p *Podman) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	if ok, err := p.volumeExists(ctx, name); err == nil && ok {
		return nil
	}
	err := p.call(ctx, http.MethodPost, "/volumes/create", nil, podmanVolumeCreate{Name: name, Driver: "local", Label: labels}, nil)
	if err != nil {
		if ok, err2 := p.volumeExists(ctx, name); err2 == nil && ok {
			return nil // created meanwhile by another worker
		}
		return fmt.Errorf("sandbox: create volume %s: %w", name, err)
	}
	return nil
}

// RemoveVolume implements Runtime.
func (p *Podman) RemoveVolume(ctx context.Context, name string, force bool) error {
	err := p.call(ctx, http.MethodDelete, "/volumes/%s", podmanVolumeRemoveParams(force), nil, nil, name)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("sandbox: remove volume %s: %w", name, err)
	}
	return nil
}

// ListVolumes implements Runtime.
func (p *Podman) ListVolumes(ctx context.Context, labels map[string]string) ([]VolumeInfo, error) {
	var vs []podmanVolume
	if err := p.call(ctx, http.MethodGet, "/volumes/json", podmanVolumeListParams(labels), nil, &vs); err != nil {
		return nil, fmt.Errorf("sandbox: list volumes: %w", err)
	}
	out := make([]VolumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, VolumeInfo{Name: v.Name, Labels: v.Labels, Created: v.CreatedAt})
	}
	return out, nil
}

// ImageID implements Runtime.
func (p *Podman) ImageID(ctx context.Context, image string) (string, error) {
	var img podmanImage
	if err := p.call(ctx, http.MethodGet, "/images/%s/json", nil, nil, &img, image); err != nil {
		return "", fmt.Errorf("sandbox: inspect image %s: %w", image, err)
	}
	return img.ID, nil
}
