package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
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
	// LibsLink, in the volume, names the directory that holds the
	// installed set (a symbolic link, e.g. "s-0123456789ab"). An install
	// writes into a fresh directory of its own, at the path jobs will see
	// it at (some toolchains, Go's build cache among them, key what they
	// store by absolute path), and when every step succeeded creates the
	// link: a set is there completely or not at all, and of two installs
	// racing for one volume (two workers on one engine) the first link wins
	// and the other's directory is removed.
	LibsLink = agent.LibsLink
	// LabelLibs labels library volumes with their key.
	LabelLibs = "sandq.libs"
	// VolumePrefix starts the name of every library volume.
	VolumePrefix = "sandq-libs-"
)

// installUID is the uid install steps run as. They may write only the
// set's directory, which the agent makes theirs.
const installUID = 1000

// setName is what LibsLink may point at: a directory an install made.
var setName = regexp.MustCompile(`^s-[0-9a-f]{12}$`)

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
	// directory in the volume, which is also where jobs see it. They run in order as the job uid, with a
	// network; the first that fails with StopOnFailure set ends the
	// install (one without it may fail: a warm-up, say).
	Steps func(dir string) []agent.Step
	// Files are written into the install container's work dir first
	// (installer scripts, a CA bundle).
	Files []agent.File
	// Limits size the install container.
	Limits ContainerLimits
	// MaxBytes caps the volume's size on disk, measured by the agent over
	// the whole volume; a larger set fails the install and is removed.
	// Zero means no cap.
	MaxBytes int64
	// Timeout bounds the steps together. Zero: only each step's own.
	Timeout time.Duration
	// Namespace labels the set's volume (LabelNamespace) when this install
	// creates it: the namespace whose collector manages it.
	Namespace string
	// Egress serves the install's only way out. The install container
	// has no network at all; its steps reach EgressProxy, which the agent
	// relays over its stream to Egress (the worker's proxy, which allows
	// the mirrors only). Nil: no way out.
	Egress EgressHandler
}

// EgressProxy is the address, inside a container whose run has egress
// (an install, InstallRequest.Egress; a job with a network policy), where
// steps find the way out: set it as HTTP(S)_PROXY.
const EgressProxy = "127.0.0.1:3128"

// InstallResult is the outcome of Pool.Install.
type InstallResult struct {
	// Volume names the set's volume; pass it in Spec.Volume.
	Volume string
	// Dir is the set's directory as jobs see it (under LibsDir). Only
	// paths under it are stable: the same set installed again, in
	// another volume, is in another directory.
	Dir string
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
	// Bytes is the volume's size when the set was committed.
	Bytes int64
	// CommitError says why a set whose steps succeeded was not linked
	// (over the size cap).
	CommitError string
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
	if dir, ok := p.libsReady[vol]; ok {
		p.mu.Unlock()
		return InstallResult{Volume: vol, Dir: dir, Cached: true, OK: true, Took: time.Since(start)}, nil
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
	if c.err == nil && !c.res.OK {
		// A failed install leaves nothing: its volume goes, unless another
		// install (another worker's) uses it this moment.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := p.cfg.Runtime.RemoveVolume(rctx, vol, false); err != nil {
			p.log.Debug().Err(err).Str("volume", vol).Msg("failed install's volume kept")
		}
		cancel()
	}
	c.res.Volume = vol
	c.res.Took = time.Since(start)
	p.mu.Lock()
	delete(p.installs, vol)
	if c.err == nil && c.res.OK {
		p.libsReady[vol] = c.res.Dir
	}
	p.mu.Unlock()
	close(c.done)
	return c.res, c.err
}

func (p *Pool) install(ctx context.Context, vol string, req InstallRequest) (InstallResult, error) {
	rt := p.cfg.Runtime
	labels := map[string]string{LabelManaged: "true", LabelLibs: req.Key, LabelBackend: rt.Name()}
	if req.Namespace != "" {
		labels[LabelNamespace] = req.Namespace
	}
	err := rt.CreateVolume(ctx, vol, labels)
	if err != nil {
		return InstallResult{}, err
	}
	if err := p.reserve(ctx); err != nil {
		return InstallResult{}, err
	}
	defer p.release()
	startCtx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	cname := "install-" + sanitizeName(req.Key)
	c, err := startContainer(startCtx, rt, ContainerSpec{
		Name:  containerName(p.cfg.Owner, cname, p.seq.Add(1)),
		Image: req.Image,
		Labels: map[string]string{
			LabelManaged: "true", LabelOwner: p.cfg.Owner, LabelPool: cname, LabelBackend: rt.Name(),
		},
		Limits: req.Limits,
		// Package scripts are untrusted code: the install runs in the
		// pool's runtime (gVisor when configured), with no network at
		// all; its only way out is Egress.
		OCIRuntime:     p.cfg.OCIRuntime,
		Volume:         vol,
		VolumeWritable: true,
		Network:        false,
		JobUID:         installUID,
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
		{Name: "check", Argv: []string{"readlink", "--", LibsLink}, Timeout: 10 * time.Second},
	}})
	if err != nil {
		return InstallResult{}, err
	}
	if st := check.Last(); st.OK() {
		dir, err := setDir(st)
		if err != nil {
			return InstallResult{}, err
		}
		return InstallResult{Cached: true, OK: true, Dir: dir}, nil
	}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "s-" + hex.EncodeToString(rnd[:])
	dir := LibsDir + "/" + name
	steps := req.Steps(dir)
	// The agent, as root, makes the volume root its own and the set's
	// directory the install's, and after the steps measures the whole
	// volume and links the set (or, when another install won the race,
	// removes this one's directory).
	run := &agent.RunRequest{Files: req.Files, Steps: steps, Timeout: req.Timeout,
		Libs: &agent.Libs{Root: LibsDir, Dir: dir, Link: LibsLink, MaxBytes: req.MaxBytes}}
	if req.Egress != nil {
		run.Egress = EgressProxy
	}
	out, err := c.Run(ctx, run, WithEgress(req.Egress))
	if err != nil {
		return InstallResult{}, err
	}
	if out.FilesError != "" {
		return InstallResult{}, fmt.Errorf("sandbox: install files: %s", out.FilesError)
	}
	res := InstallResult{Steps: out.Steps}
	if out.Libs == nil {
		return InstallResult{}, errors.New("sandbox: the agent did not commit the set")
	}
	res.Bytes = out.Libs.Bytes
	if out.Libs.Linked == "" {
		res.CommitError = out.Libs.Error
		return res, nil
	}
	if !setName.MatchString(out.Libs.Linked) {
		return InstallResult{}, fmt.Errorf("sandbox: %s points at %q, not a set directory", LibsLink, out.Libs.Linked)
	}
	res.OK, res.Dir = true, LibsDir+"/"+out.Libs.Linked
	return res, nil
}

// setDir turns the output of `readlink LibsLink` into the set's directory.
func setDir(st agent.StepResult) (string, error) {
	name := strings.TrimSpace(string(st.Stdout.Bytes()))
	if !setName.MatchString(name) {
		return "", fmt.Errorf("sandbox: %s points at %q, not a set directory", LibsLink, name)
	}
	return LibsDir + "/" + name, nil
}

// ForgetLibs drops the record that the set in volume vol is installed, so
// the next Install checks the engine again. Tests and operators who remove
// library volumes use it.
func (p *Pool) ForgetLibs(vol string) {
	p.mu.Lock()
	delete(p.libsReady, vol)
	p.mu.Unlock()
}
