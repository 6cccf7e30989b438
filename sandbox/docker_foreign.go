package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

var _ foreignRuntime = (*Docker)(nil)

// InspectImage implements foreignRuntime.
func (d *Docker) InspectImage(ctx context.Context, ref string) (ImageInfo, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		return ImageInfo{}, fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	info := ImageInfo{ID: ins.ID, Refs: slices.Concat(ins.RepoTags, ins.RepoDigests)}
	if ins.Config != nil {
		for v := range ins.Config.Volumes {
			info.Volumes = append(info.Volumes, v)
		}
		slices.Sort(info.Volumes)
	}
	return info, nil
}

// StatImage implements foreignRuntime: it creates a container of the
// image, never started, and asks the engine what each path is.
func (d *Docker) StatImage(ctx context.Context, image string, paths []string) (map[string]PathStat, error) {
	cfg := &container.Config{Image: image, Entrypoint: []string{"/nonexistent"}, NetworkDisabled: true,
		Labels: map[string]string{LabelManaged: "true"}}
	hc := &container.HostConfig{NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"}}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("create a container to inspect it: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Remove(rctx, resp.ID)
	}()
	out := map[string]PathStat{}
	for _, p := range paths {
		st, err := d.cli.ContainerStatPath(ctx, resp.ID, p)
		switch {
		case cerrdefs.IsNotFound(err):
			out[p] = ""
		case err != nil:
			return nil, fmt.Errorf("stat %s: %w", p, err)
		case st.Mode&os.ModeSymlink != 0:
			out[p] = PathStat("symbolic link to " + st.LinkTarget)
		case st.Mode.IsDir():
			out[p] = "dir"
		case st.Mode.IsRegular():
			out[p] = "file"
		default:
			out[p] = PathStat("special file (" + st.Mode.Type().String() + ")")
		}
	}
	return out, nil
}

// FillAgentVolume implements foreignRuntime: a container of the sandq
// image from, with the empty volume at AgentDir, makes the engine copy
// the image's AgentDir into it; the agent it starts exits at once
// (--job-uid 0 is refused). The agent is then looked for in the volume.
func (d *Docker) FillAgentVolume(ctx context.Context, vol, from string) error {
	cfg := &container.Config{Image: from, Entrypoint: []string{AgentDir + "/agent"}, Cmd: []string{"--job-uid", "0"},
		User: "0:0", NetworkDisabled: true, Labels: map[string]string{LabelManaged: "true"}}
	hc := &container.HostConfig{
		NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"}, LogConfig: container.LogConfig{Type: "none"},
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: AgentDir}},
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Remove(rctx, resp.ID)
	}()
	waitCh, errCh := d.cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	select {
	case <-waitCh:
	case err := <-errCh:
		return fmt.Errorf("wait: %w", err)
	}
	st, err := d.cli.ContainerStatPath(ctx, resp.ID, AgentDir+"/agent")
	if err != nil {
		return fmt.Errorf("the agent is not in the volume: %w", err)
	}
	if !st.Mode.IsRegular() || st.Mode.Perm()&0o111 == 0 {
		return errors.New("the agent in the volume is not an executable file")
	}
	return nil
}

// foreignConfig overrides what a foreign image's config would set.
func foreignConfig(spec ContainerSpec, cfg *container.Config) {
	if spec.Agent == "" {
		return
	}
	cfg.Entrypoint = []string{AgentDir + "/agent"}
	cfg.Healthcheck = &container.HealthConfig{Test: []string{"NONE"}}
	cfg.ExposedPorts = nil
	cfg.Volumes = nil
	cfg.StopSignal = "SIGKILL"
	cfg.Env = nil
	for _, k := range goRuntimeEnv {
		cfg.Env = append(cfg.Env, k+"=")
	}
}

// agentMount is the agent volume's mount of a foreign image's container:
// read-only, and never filled from the image (nocopy): an image with its
// own /sandq/agent must not put it in the volume other images share.
func agentMount(spec ContainerSpec) []mount.Mount {
	if spec.Agent == "" {
		return nil
	}
	return []mount.Mount{{Type: mount.TypeVolume, Source: spec.Agent, Target: AgentDir, ReadOnly: true,
		VolumeOptions: &mount.VolumeOptions{NoCopy: true}}}
}
