package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sandq/sandq/agent"
)

// Library sets. A job's libraries are installed once per engine into a
// named volume, by an install container that has a network; run containers
// mount the volume read-only and have none. The volume's name is derived
// from InstallRequest.Key, so a second job with the same set finds it.
const (
	// LibsDir is where a library set's volume is mounted.
	LibsDir = "/sandq/libs"
	// LibsSetDir holds the installed set. An install writes into a staging
	// directory beside it and renames that to LibsSetDir when every step
	// succeeded: a set is there completely or not at all, and of two
	// installs racing for one volume (two workers on one engine) the first
	// rename wins and the other's staging directory is removed.
	LibsSetDir = LibsDir + "/set"
	// LabelLibs labels library volumes with their key.
	LabelLibs = "sandq.libs"
	// VolumePrefix starts the name of every library volume.
	VolumePrefix = "sandq-libs-"
)

// InstallRequest is one library set to install.
type InstallRequest struct {
	// Key identifies the set: requests with equal keys share one volume,
	// installed once. It must cover everything that changes the installed
	// files (image ID, installer, library names, index URLs) and be usable
	// in a volume name ([a-zA-Z0-9_.-]).
	Key string
	// Image is the language's image; the installer runs in it.
	Image string
	// Steps returns the steps that install the set into dir, a fresh
	// directory in the volume. They run in order as the job uid, with a
	// network; the first that fails ends the install.
	Steps func(dir string) []agent.Step
	// Files are written into the install container's work dir first
	// (installer scripts, a CA bundle).
	Files []agent.File
	// Limits size the install container.
	Limits ContainerLimits
}

// InstallResult is the outcome of Pool.Install.
type InstallResult struct {
	// Volume names the set's volume; pass it in Spec.Volume.
	Volume string
	// Cached reports that the set was already installed: no installer ran
	// for this request.
	Cached bool
	// OK reports that the set is installed and usable.
	OK bool
	// Steps are the installer's steps when one ran; on failure the last is
	// the one that failed.
	Steps []agent.StepResult
	// Took is the time Install took, waiting for another request's install
	// of the same set included.
	Took time.Duration
}

type installCall struct {
	done chan struct{}
	res  InstallResult
	err  error
}

// Install makes sure the library set of req is installed, installing it if
// it is not. Concurrent requests for one set wait for a single install.
// The error is an infrastructure fault; a failed installer is a result
// with OK false and the installer's output in Steps.
func (p *Pool) Install(ctx context.Context, req InstallRequest) (InstallResult, error) {
	start := time.Now()
	vol := VolumePrefix + sanitizeName(req.Key)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return InstallResult{}, ErrPoolClosed
	}
	if p.libsReady[vol] {
		p.mu.Unlock()
		return InstallResult{Volume: vol, Cached: true, OK: true, Took: time.Since(start)}, nil
	}
	if c := p.installs[vol]; c != nil {
		p.mu.Unlock()
		select {
		case <-c.done:
			res := c.res
			res.Took = time.Since(start)
			return res, c.err
		case <-ctx.Done():
			return InstallResult{}, fmt.Errorf("sandbox: wait for install: %w", context.Cause(ctx))
		}
	}
	c := &installCall{done: make(chan struct{})}
	p.installs[vol] = c
	p.mu.Unlock()

	c.res, c.err = p.install(ctx, vol, req)
	c.res.Volume = vol
	c.res.Took = time.Since(start)
	p.mu.Lock()
	delete(p.installs, vol)
	if c.err == nil && c.res.OK {
		p.libsReady[vol] = true
	}
	p.mu.Unlock()
	close(c.done)
	return c.res, c.err
}

func (p *Pool) install(ctx context.Context, vol string, req InstallRequest) (InstallResult, error) {
	rt := p.cfg.Runtime
	err := rt.CreateVolume(ctx, vol, map[string]string{
		LabelManaged: "true", LabelLibs: req.Key, LabelBackend: rt.Name(),
	})
	if err != nil {
		return InstallResult{}, err
	}
	startCtx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	name := "install-" + sanitizeName(req.Key)
	c, err := startContainer(startCtx, rt, ContainerSpec{
		Name:  containerName(p.cfg.Owner, name, p.seq.Add(1)),
		Image: req.Image,
		Labels: map[string]string{
			LabelManaged: "true", LabelOwner: p.cfg.Owner, LabelPool: name, LabelBackend: rt.Name(),
		},
		Limits:         req.Limits,
		OCIRuntime:     p.cfg.OCIRuntime,
		Volume:         vol,
		VolumeWritable: true,
		Network:        true,
	}, p.log)
	cancel()
	if err != nil {
		return InstallResult{}, fmt.Errorf("sandbox: start install container: %w", err)
	}
	p.mu.Lock()
	p.all[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.all, c)
		p.mu.Unlock()
		c.remove(ctx)
	}()

	// Installed already: by another worker on this engine, or before this
	// worker started.
	check, err := c.Run(ctx, &agent.RunRequest{Steps: []agent.Step{
		{Name: "check", Argv: []string{"test", "-d", LibsSetDir}, Timeout: 10 * time.Second},
	}})
	if err != nil {
		return InstallResult{}, err
	}
	if check.Last().OK() {
		return InstallResult{Cached: true, OK: true}, nil
	}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	staging := LibsDir + "/.staging-" + hex.EncodeToString(rnd[:])
	steps := req.Steps(staging)
	for i := range steps {
		steps[i].StopOnFailure = true
	}
	// The commit: rename the staging directory to the set. If another
	// install won the race, its set stays and this one's staging goes.
	steps = append(steps, agent.Step{
		Name: "commit", Timeout: time.Minute, StopOnFailure: true,
		Argv: []string{"/bin/sh", "-c",
			`mv -T -- "$1" "$2" 2>/dev/null && exit 0; rm -rf -- "$1"; test -d "$2"`,
			"sh", staging, LibsSetDir},
	})
	out, err := c.Run(ctx, &agent.RunRequest{Files: req.Files, Steps: steps})
	if err != nil {
		return InstallResult{}, err
	}
	res := InstallResult{Steps: out.Steps, OK: out.FilesError == "" && len(out.Steps) == len(steps) && out.Last().OK()}
	if out.FilesError != "" {
		return InstallResult{}, fmt.Errorf("sandbox: install files: %s", out.FilesError)
	}
	if !res.OK {
		// Leave no half-installed staging directory behind.
		_, _ = c.Run(ctx, &agent.RunRequest{Steps: []agent.Step{
			{Name: "clean", Argv: []string{"rm", "-rf", "--", staging}, Timeout: time.Minute},
		}})
	}
	return res, nil
}

// ForgetLibs drops the record that the set in volume vol is installed, so
// the next Install checks the engine again. Tests and operators who remove
// library volumes use it.
func (p *Pool) ForgetLibs(vol string) {
	p.mu.Lock()
	delete(p.libsReady, vol)
	p.mu.Unlock()
}
