//go:build remote

package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rs/zerolog"
	"github.com/sirupsen/logrus"
)

// PodmanSupported reports whether this binary has the Podman backend: it
// was built with PodmanBuildTags.
const PodmanSupported = true

// Podman is the Runtime on Podman's libpod REST API (`podman system
// service`), through the podman v5 bindings. It creates the same
// containers as Docker: hostConfig's settings, one for one, in a libpod
// SpecGenerator (podmanSpec).
//
// The bindings keep their connection in a context (bindings.NewConnection).
// Every call here runs on a context that takes its values from that
// connection and its deadline and cancellation from the caller's (connCtx).
type Podman struct {
	uri   string
	conn  context.Context
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
	conn, err := bindings.NewConnection(context.Background(), cfg.URI)
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

// connCtx is a call's context on a bindings connection: the bindings'
// values (client, service version) from conn, everything else (deadline,
// cancellation, cause, other values) from the call's context.
type connCtx struct {
	context.Context
	conn context.Context
}

func (c connCtx) Value(key any) any {
	if v := c.conn.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

func (p *Podman) ctx(ctx context.Context) context.Context { return connCtx{Context: ctx, conn: p.conn} }

// Ping checks that the service answers.
func (p *Podman) Ping(ctx context.Context) error {
	conn, err := bindings.GetClient(p.conn)
	if err != nil {
		return err
	}
	resp, err := conn.DoRequest(ctx, nil, http.MethodGet, "/_ping", nil, nil)
	if err == nil {
		defer resp.Body.Close()
		err = resp.Process(nil)
	}
	if err != nil {
		return fmt.Errorf("sandbox: podman ping: %w", err)
	}
	return nil
}

// Close releases the client's idle connections.
func (p *Podman) Close() error {
	if conn, err := bindings.GetClient(p.conn); err == nil {
		conn.Client.CloseIdleConnections()
	}
	return nil
}

// Name implements Runtime.
func (p *Podman) Name() string { return "podman" }

// podmanSpec maps a spec to libpod's settings: hostConfig's, one for one.
// seccompPath is the profile's file on the service's host
// (seccompProfileFile).
func podmanSpec(cs ContainerSpec, nproc uint64, seccompPath string) *specgen.SpecGenerator {
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
	s := specgen.NewSpecGenerator(cs.Image, false)
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
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	if cs.Network {
		s.NetNS = specgen.Namespace{NSMode: specgen.Bridge} // the default network
	}
	if cs.Volume != "" {
		opt := "ro"
		if cs.VolumeWritable {
			opt = "rw"
		}
		s.Volumes = []*specgen.NamedVolume{{Name: cs.Volume, Dest: LibsDir, Options: []string{opt, "nosuid", "nodev"}}}
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
	s.IpcNS = specgen.Namespace{NSMode: specgen.Private}
	s.ShmSize = &shm
	s.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1"}
	s.LogConfiguration = &specgen.LogConfig{Driver: "none"}
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
	seccompPath, err := seccompProfileFile()
	if err != nil {
		return "", err
	}
	resp, err := containers.CreateWithSpec(p.ctx(ctx), podmanSpec(cs, p.nproc, seccompPath), nil)
	if err != nil {
		return "", fmt.Errorf("sandbox: create container: %w", err)
	}
	return resp.ID, nil
}

// podmanStream adapts the bindings' Attach, which blocks copying a reader
// to the container's stdin and its demultiplexed stdout to a writer, to a
// Stream: writes go through a pipe to stdin, stdout comes out of a pipe.
type podmanStream struct {
	stdin  *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	conns  *connSet
	once   sync.Once
}

func (s *podmanStream) Read(p []byte) (int, error)  { return s.out.Read(p) }
func (s *podmanStream) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// Close ends stdin and closes the attach connection: the engine closes the
// agent's stdin (StdinOnce) and the bindings' Attach returns.
func (s *podmanStream) Close() error {
	s.once.Do(func() {
		_ = s.stdin.Close()
		s.conns.closeAll()
		s.cancel()
		_ = s.out.Close()
	})
	return nil
}

// connSet records the connections a bindings client dials, so that the
// hijacked attach connection, which the bindings do not expose, can be
// closed.
type connSet struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// Attach implements Runtime.
//
// The bindings' Attach swaps the connection's HTTP transport for one that
// captures the dialed socket, unsynchronized ("one giant race condition" in
// its own words), so each attach gets a connection of its own, never
// shared with other calls. It must be open before Start: Attach returns
// once the service has switched protocols.
func (p *Podman) Attach(ctx context.Context, id string) (Stream, error) {
	// The stream outlives this call: its context is ended by Close.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	conns := &connSet{}
	ready := make(chan bool, 1)
	done := make(chan error, 1)
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		err := func() error {
			conn, err := bindings.NewConnection(sctx, p.uri)
			if err != nil {
				return err
			}
			client, err := bindings.GetClient(conn)
			if err != nil {
				return err
			}
			tr, ok := client.Client.Transport.(*http.Transport)
			if !ok {
				return fmt.Errorf("unexpected transport %T", client.Client.Transport)
			}
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err == nil && !conns.add(c) {
					c.Close()
					return nil, net.ErrClosed
				}
				return c, err
			}
			// An empty DetachKeys disables detaching: no byte sequence on
			// stdin may end the session.
			opts := new(containers.AttachOptions).WithStream(true).WithDetachKeys("")
			// Pointers only: the bindings call reflect.Value.IsNil on each stream.
			return containers.Attach(conn, id, stdinR, outW, &agentLog{p.log, id}, ready, opts)
		}()
		outW.CloseWithError(cmpErr(err, io.EOF))
		_ = stdinR.CloseWithError(cmpErr(err, io.ErrClosedPipe))
		done <- err
	}()
	s := &podmanStream{stdin: stdinW, out: outR, cancel: cancel, conns: conns}
	select {
	case <-ready:
		return s, nil
	case err := <-done:
		s.Close()
		if isNotFound(err) {
			err = fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		return nil, fmt.Errorf("sandbox: attach: %w", cmpErr(err, io.ErrUnexpectedEOF))
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("sandbox: attach: %w", context.Cause(ctx))
	}
}

// Start implements Runtime.
func (p *Podman) Start(ctx context.Context, id string) error {
	if err := containers.Start(p.ctx(ctx), id, nil); err != nil {
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
	opts := new(containers.RemoveOptions).WithForce(true).WithVolumes(true)
	reports, err := containers.Remove(p.ctx(ctx), id, opts)
	if err == nil {
		for _, r := range reports {
			if r.Err != nil && !isNotFound(r.Err) && !strings.Contains(r.Err.Error(), "no such container") {
				err = r.Err
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
	ins, err := containers.Inspect(p.ctx(ctx), id, nil)
	if err != nil {
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
	var filter []string
	for k, v := range labels {
		filter = append(filter, k+"="+v)
	}
	opts := new(containers.ListOptions).WithAll(true).WithFilters(map[string][]string{"label": filter})
	cs, err := containers.List(p.ctx(ctx), opts)
	if err != nil {
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

// CreateVolume implements Runtime.
func (p *Podman) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	if ok, err := volumes.Exists(p.ctx(ctx), name, nil); err == nil && ok {
		return nil
	}
	_, err := volumes.Create(p.ctx(ctx), entities.VolumeCreateOptions{Name: name, Driver: "local", Label: labels}, nil)
	if err != nil {
		if ok, err2 := volumes.Exists(p.ctx(ctx), name, nil); err2 == nil && ok {
			return nil // created meanwhile by another worker
		}
		return fmt.Errorf("sandbox: create volume %s: %w", name, err)
	}
	return nil
}

// RemoveVolume implements Runtime.
func (p *Podman) RemoveVolume(ctx context.Context, name string, force bool) error {
	err := volumes.Remove(p.ctx(ctx), name, new(volumes.RemoveOptions).WithForce(force))
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("sandbox: remove volume %s: %w", name, err)
	}
	return nil
}

// ListVolumes implements Runtime.
func (p *Podman) ListVolumes(ctx context.Context, labels map[string]string) ([]VolumeInfo, error) {
	var filter []string
	for k, v := range labels {
		filter = append(filter, k+"="+v)
	}
	vs, err := volumes.List(p.ctx(ctx), new(volumes.ListOptions).WithFilters(map[string][]string{"label": filter}))
	if err != nil {
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
	img, err := images.GetImage(p.ctx(ctx), image, nil)
	if err != nil {
		return "", fmt.Errorf("sandbox: inspect image %s: %w", image, err)
	}
	return img.ID, nil
}
