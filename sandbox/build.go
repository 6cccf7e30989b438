package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"
)

// Environment images (docs/environments.md, "Recipes"). A recipe's image
// is a sandq language image plus one layer: a build container of the base
// image runs a script as root, with no network at all (whatever it needs
// from outside was fetched beforehand by an install container, through
// the egress proxy, into volumes it mounts read-only), then files are
// copied in and the container is committed. Everything else of a job
// container's hardening holds for it (capabilities dropped but the few
// dpkg needs, sandq's seccomp profile, no-new-privileges, limits, the
// pool's OCI runtime); the root file system is writable, as it must be to
// install packages.

// Labels of an environment image.
const (
	LabelEnvHash   = "sandq.env.hash"
	LabelEnvName   = "sandq.env.name"
	LabelEnvTenant = "sandq.env.tenant"
)

// ErrBuildUnsupported: the backend cannot build environment images.
var ErrBuildUnsupported = errors.New("sandbox: this backend builds no environment image (Docker does)")

// buildCaps are what a build's root needs to install packages: own and
// chmod files of any owner, and maintainer scripts that change users.
var buildCaps = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"}

// BuildMount is a volume a build container mounts read-only.
type BuildMount struct {
	Volume, Target string
}

// BuildFile is a file copied into the image, owned by root, mode 0644.
type BuildFile struct {
	Path    string
	Content []byte
}

// BuildRequest is one environment image to build.
type BuildRequest struct {
	// Base is the image to start from (a sandq language image).
	Base string
	// Tag names the image ("sandq-env/<hash12>:latest").
	Tag string
	// Script runs as root in /bin/sh -e.
	Script string
	Mounts []BuildMount
	Files  []BuildFile
	// Env is added to the image's environment (KEY=VALUE).
	Env []string
	// Labels are added to the image's.
	Labels  map[string]string
	Limits  ContainerLimits
	Timeout time.Duration
}

// BuildResult is a build's outcome. A script that failed is not an error:
// OK is false and Log says why.
type BuildResult struct {
	OK       bool
	ImageID  string
	Log      string
	ExitCode int
	TimedOut bool
	Took     time.Duration
}

// ImageSummary is an image as listed by the engine.
type ImageSummary struct {
	ID     string
	Tags   []string
	Labels map[string]string
}

// imageBuilder is what a runtime needs to build environment images.
type imageBuilder interface {
	BuildImage(ctx context.Context, req BuildRequest, ociRuntime string) (BuildResult, error)
	ListImages(ctx context.Context, labels map[string]string) ([]ImageSummary, error)
	RemoveImage(ctx context.Context, id string) error
}

func (p *Pool) builder() (imageBuilder, error) {
	b, ok := p.cfg.Runtime.(imageBuilder)
	if !ok {
		return nil, fmt.Errorf("%w (backend %s)", ErrBuildUnsupported, p.cfg.Runtime.Name())
	}
	return b, nil
}

// BuildImage builds req's image in the pool's OCI runtime.
func (p *Pool) BuildImage(ctx context.Context, req BuildRequest) (BuildResult, error) {
	b, err := p.builder()
	if err != nil {
		return BuildResult{}, err
	}
	if err := p.reserve(ctx); err != nil {
		return BuildResult{}, err
	}
	defer p.release()
	return b.BuildImage(ctx, req, p.cfg.OCIRuntime)
}

// ListImages lists the engine's images carrying all of labels.
func (p *Pool) ListImages(ctx context.Context, labels map[string]string) ([]ImageSummary, error) {
	b, err := p.builder()
	if err != nil {
		return nil, err
	}
	return b.ListImages(ctx, labels)
}

// RemoveImage removes an image by ID (its tags with it), after the pool's
// idle containers of it; one that is gone is a success, one a container
// uses is an error.
func (p *Pool) RemoveImage(ctx context.Context, id string) error {
	b, err := p.builder()
	if err != nil {
		return err
	}
	p.dropIdle(id)
	return b.RemoveImage(ctx, id)
}

// dropIdle removes the pool's idle containers of image (by the ID their
// key holds).
func (p *Pool) dropIdle(image string) {
	var old []staleIdle
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range p.subs {
		if sp.key.Image != image {
			continue
		}
		for _, c := range sp.idle {
			old = append(old, staleIdle{c, sp})
			delete(p.all, c)
		}
		sp.idle = nil
		sp.warm = false
	}
	p.removeStaleLocked(old)
}

var _ imageBuilder = (*Docker)(nil)

// BuildImage implements imageBuilder.
func (d *Docker) BuildImage(ctx context.Context, req BuildRequest, ociRuntime string) (BuildResult, error) {
	start := time.Now()
	base, err := d.cli.ImageInspect(ctx, req.Base)
	if err != nil {
		return BuildResult{}, fmt.Errorf("sandbox: build: inspect %s: %w", req.Base, err)
	}
	spec := ContainerSpec{Image: base.ID, Limits: req.Limits, OCIRuntime: ociRuntime, JobUID: 1}
	hc := hostConfig(spec)
	hc.ReadonlyRootfs = false
	hc.CapAdd = buildCaps
	hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", req.Limits.TmpBytes)}
	hc.LogConfig = container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}}
	hc.Mounts = nil
	for _, m := range req.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Volume, Target: m.Target, ReadOnly: true})
	}
	cfg := &container.Config{
		Image: base.ID, User: "0:0", WorkingDir: "/", Hostname: "sandbox",
		Entrypoint: []string{"/bin/sh", "-ec", req.Script}, Cmd: nil,
		Env:             []string{"DEBIAN_FRONTEND=noninteractive", "HOME=/root", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:          map[string]string{LabelManaged: "true", LabelBackend: d.Name()},
		NetworkDisabled: true,
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return BuildResult{}, fmt.Errorf("sandbox: build: create: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Remove(rctx, resp.ID)
	}()
	wctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	waitCh, errCh := d.cli.ContainerWait(wctx, resp.ID, container.WaitConditionNextExit)
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return BuildResult{}, fmt.Errorf("sandbox: build: start: %w", err)
	}
	res := BuildResult{}
	select {
	case w := <-waitCh:
		res.ExitCode = int(w.StatusCode)
	case err := <-errCh:
		if ctx.Err() != nil {
			return BuildResult{}, fmt.Errorf("sandbox: build: %w", context.Cause(ctx))
		}
		if wctx.Err() == nil {
			return BuildResult{}, fmt.Errorf("sandbox: build: wait: %w", err)
		}
		res.TimedOut = true
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = d.cli.ContainerKill(kctx, resp.ID, "KILL")
		kcancel()
	}
	res.Log = d.buildLog(ctx, resp.ID)
	if res.TimedOut {
		res.Log += fmt.Sprintf("\nsandq: the build exceeded its time limit of %s\n", req.Timeout)
	}
	if res.TimedOut || res.ExitCode != 0 {
		res.Took = time.Since(start)
		return res, nil
	}
	if len(req.Files) > 0 {
		if err := d.cli.CopyToContainer(ctx, resp.ID, "/", filesTar(req.Files), container.CopyToContainerOptions{}); err != nil {
			return BuildResult{}, fmt.Errorf("sandbox: build: copy files: %w", err)
		}
	}
	// The committed image's configuration is the base's (its agent as
	// entrypoint, its user, work dir and environment) plus req's.
	ic := *base.Config
	ic.Env = slices.Concat(base.Config.Env, req.Env)
	ic.Labels = maps.Clone(base.Config.Labels)
	if ic.Labels == nil {
		ic.Labels = map[string]string{}
	}
	maps.Copy(ic.Labels, req.Labels)
	cr, err := d.cli.ContainerCommit(ctx, resp.ID, container.CommitOptions{Reference: req.Tag, Config: &container.Config{
		User: ic.User, Env: ic.Env, Entrypoint: ic.Entrypoint, Cmd: ic.Cmd, WorkingDir: ic.WorkingDir, Labels: ic.Labels,
		StopSignal: ic.StopSignal, Healthcheck: ic.Healthcheck,
	}})
	if err != nil {
		return BuildResult{}, fmt.Errorf("sandbox: build: commit: %w", err)
	}
	res.OK, res.ImageID, res.Took = true, cr.ID, time.Since(start)
	return res, nil
}

// buildLog is a build container's output, stdout and stderr interleaved
// as well as the engine keeps them.
func (d *Docker) buildLog(ctx context.Context, id string) string {
	rc, err := d.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Sprintf("sandq: the build's output could not be read: %v\n", err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		out.WriteString(fmt.Sprintf("\nsandq: reading the build's output: %v\n", err))
	}
	return out.String()
}

func filesTar(files []BuildFile) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		parts := strings.Split(name, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !dirs[d] {
				dirs[d] = true
				_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)})
			}
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(f.Content)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write(f.Content)
	}
	_ = tw.Close()
	return &buf
}

// ListImages implements imageBuilder.
func (d *Docker) ListImages(ctx context.Context, labels map[string]string) ([]ImageSummary, error) {
	f := filters.NewArgs()
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	list, err := d.cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("sandbox: list images: %w", err)
	}
	out := make([]ImageSummary, 0, len(list))
	for _, im := range list {
		out = append(out, ImageSummary{ID: im.ID, Tags: im.RepoTags, Labels: im.Labels})
	}
	return out, nil
}

// RemoveImage implements imageBuilder.
func (d *Docker) RemoveImage(ctx context.Context, id string) error {
	_, err := d.cli.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("sandbox: remove image %s: %w", shortID(strings.TrimPrefix(id, "sha256:")), err)
	}
	return nil
}
