package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
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
	LibsLink = LibsDir + "/current"
	// LabelLibs labels library volumes with their key.
	LabelLibs = "sandq.libs"
	// VolumePrefix starts the name of every library volume.
	VolumePrefix = "sandq-libs-"
)

// installUID is the uid install steps run as: the owner of the empty
// /sandq/libs the images carry, which a new volume copies up.
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
	// MaxBytes caps the installed set's size on disk; a larger set fails
	// the install and is removed. Zero means no cap.
	MaxBytes int64
}

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
	err := rt.CreateVolume(ctx, vol, map[string]string{
		LabelManaged: "true", LabelLibs: req.Key, LabelBackend: rt.Name(),
	})
	if err != nil {
		return InstallResult{}, err
	}
	startCtx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	cname := "install-" + sanitizeName(req.Key)
	c, err := startContainer(startCtx, rt, ContainerSpec{
		Name:  containerName(p.cfg.Owner, cname, p.seq.Add(1)),
		Image: req.Image,
		Labels: map[string]string{
			LabelManaged: "true", LabelOwner: p.cfg.Owner, LabelPool: cname, LabelBackend: rt.Name(),
		},
		Limits: req.Limits,
		// The engine's default runtime: gVisor's runsc here runs with
		// --network=none, and an install needs its network.
		OCIRuntime:     "",
		Volume:         vol,
		VolumeWritable: true,
		Network:        true,
		// The image's library volume root belongs to 1000 (images.sh).
		JobUID: installUID,
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
	// The commit: check the set's size, then link it. If another install
	// won the race, its set stays and this one's directory goes. It prints
	// the winner.
	steps = append(steps, agent.Step{
		Name: "commit", Timeout: 5 * time.Minute, StopOnFailure: true,
		Argv: []string{"/bin/sh", "-c", commitScript, "sh", name, LibsLink, dir, strconv.FormatInt(req.MaxBytes>>10, 10)},
	})
	out, err := c.Run(ctx, &agent.RunRequest{Files: req.Files, Steps: steps})
	if err != nil {
		return InstallResult{}, err
	}
	if out.FilesError != "" {
		return InstallResult{}, fmt.Errorf("sandbox: install files: %s", out.FilesError)
	}
	// Every step ran (a required one that fails ends the run) and the
	// commit, last, succeeded.
	res := InstallResult{Steps: out.Steps, OK: len(out.Steps) == len(steps) && out.Last().OK()}
	if !res.OK {
		// Leave no half-installed directory behind.
		_, _ = c.Run(ctx, &agent.RunRequest{Steps: []agent.Step{
			{Name: "clean", Argv: []string{"rm", "-rf", "--", dir}, Timeout: time.Minute},
		}})
		return res, nil
	}
	if res.Dir, err = setDir(out.Last()); err != nil {
		return InstallResult{}, err
	}
	return res, nil
}

// commitScript is the commit step: sh -c commitScript sh NAME LINK DIR
// MAXKIB. It holds no library name.
const commitScript = `set -e
if [ "$4" -gt 0 ]; then
	kib=$(du -sk -- "$3" | cut -f1)
	if [ "$kib" -gt "$4" ]; then
		echo "sandq: the installed libraries take $kib KiB on disk, over the cap of $4 KiB" >&2
		rm -rf -- "$3"
		exit 1
	fi
fi
ln -s -- "$1" "$2" 2>/dev/null || rm -rf -- "$3"
readlink -- "$2"`

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
