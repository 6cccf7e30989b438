package worker

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Environments built from recipes (docs/environments.md, "Recipes"). A job
// that names one ("environment": NAME) runs in the image built from the
// recipe NAME resolves to (the tenant's own, else a shared one): its
// language's sandq image plus a layer with the recipe's Debian packages,
// libraries and files. The worker that runs the job builds the image when
// its engine lacks it, once per recipe hash:
//
//  1. an install container of the language image (sandq's install path:
//     no network, the job uid, the egress proxy, which for builds also
//     reaches the Debian mirror) downloads the packages with apt-get into
//     a volume, and the libraries are installed as a job's (a library set
//     volume);
//  2. a build container of the language image, as root, with no network
//     and a writable root file system, installs the downloaded packages
//     from the volume, copies the library set into the image, and is
//     committed with the recipe's files as sandq-env/<hash12>:latest.

// DefaultDebianHosts are what builds may reach besides the library
// mirrors: the Debian mirror sandq's images name in their apt sources.
var DefaultDebianHosts = []string{"deb.debian.org:80", "deb.debian.org:443"}

// envBuilder is what building environment images needs of the sandbox.
// *sandbox.Pool implements it (on Docker).
type envBuilder interface {
	BuildImage(ctx context.Context, req sandbox.BuildRequest) (sandbox.BuildResult, error)
	ListImages(ctx context.Context, labels map[string]string) ([]sandbox.ImageSummary, error)
	RemoveImage(ctx context.Context, id string) error
}

var _ envBuilder = (*sandbox.Pool)(nil)

// envBuilds is the handler's state of builds: one at a time per hash, and
// when each image's use was last recorded.
type envBuilds struct {
	once   sync.Once
	egress *Egress
	err    error

	mu       sync.Mutex
	building map[string]*buildCall
	used     map[string]time.Time
}

type buildCall struct {
	done  chan struct{}
	image string
	fail  string
	err   error
}

// buildFailedError is a recipe whose build failed: the job ends failed
// with the build's output, not rejected nor internal_error.
type buildFailedError struct{ reason string }

func (e *buildFailedError) Error() string { return e.reason }

// buildEgress is the egress of builds: the install egress's hosts plus the
// Debian mirror's.
func (h *Handler) buildEgress() (*Egress, error) {
	b := &h.envs
	b.once.Do(func() {
		hosts := h.cfg.Install.DebianHosts
		if len(hosts) == 0 {
			hosts = DefaultDebianHosts
		}
		b.egress, b.err = NewEgress(h.cfg.Install.Mirrors, slices.Concat(h.cfg.Install.AllowHosts, hosts), h.cfg.Logger)
	})
	return b.egress, b.err
}

// recipeImage returns the ID of the image of environment name for a job of
// tenant in lang, building it if need be. An error wrapping errInfra is a
// fault; a *buildFailedError a failed build; any other error the job's.
func (h *Handler) recipeImage(ctx context.Context, tenant, name, lang string) (id string, err error) {
	e, err := h.cfg.Store.ResolveEnvironment(ctx, tenant, name)
	if errors.Is(err, store.ErrNoEnvironment) {
		return "", fmt.Errorf("environment %q: no environment of that name (the tenant's own or shared)", name)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", errInfra, err)
	}
	r := e.Recipe
	if r.Lang != lang {
		return "", fmt.Errorf("environment %s is built on the %s image: it runs %s jobs, not %s", name, r.Lang, r.Lang, lang)
	}
	if _, ok := h.cfg.Sandbox.(envBuilder); !ok {
		return "", fmt.Errorf("environment %s: this worker builds no environment image", name)
	}
	l, ok := langs.Lookup(lang)
	if !ok {
		return "", fmt.Errorf("unknown language %q", lang)
	}
	base := l.Image(h.cfg.ImagePrefix)
	baseID, err := h.imageIDs.get(ctx, h.cfg.Sandbox, base)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errInfra, err)
	}
	hash := r.Hash(baseID)
	tag := jobs.EnvImageRepo(hash) + ":latest"
	defer func() {
		if err == nil {
			h.envHashes.Store(id, hash) // the provenance's Recipe
		}
	}()
	if id, err := h.cfg.Sandbox.ImageID(ctx, tag); err == nil {
		h.usedEnv(ctx, hash, r.Key(), id)
		return id, nil
	}

	b := &h.envs
	b.mu.Lock()
	if b.building == nil {
		b.building, b.used = map[string]*buildCall{}, map[string]time.Time{}
	}
	if c := b.building[hash]; c != nil {
		b.mu.Unlock()
		select {
		case <-c.done:
			return c.result()
		case <-ctx.Done():
			return "", fmt.Errorf("%w: wait for the build of %s: %v", errInfra, name, context.Cause(ctx))
		}
	}
	c := &buildCall{done: make(chan struct{})}
	b.building[hash] = c
	b.mu.Unlock()
	c.image, c.fail, c.err = h.buildRecipe(ctx, e, l, base, hash, tag)
	b.mu.Lock()
	delete(b.building, hash)
	b.mu.Unlock()
	close(c.done)
	return c.result()
}

func (c *buildCall) result() (string, error) {
	if c.err != nil {
		return "", c.err
	}
	if c.fail != "" {
		return "", &buildFailedError{reason: c.fail}
	}
	return c.image, nil
}

// usedEnv records (at most once a minute per image) that a job used it.
func (h *Handler) usedEnv(ctx context.Context, hash, key, id string) {
	b := &h.envs
	b.mu.Lock()
	if b.used == nil {
		b.used = map[string]time.Time{}
	}
	if time.Since(b.used[hash]) < time.Minute {
		b.mu.Unlock()
		return
	}
	b.used[hash] = time.Now()
	b.mu.Unlock()
	rec, ok, err := h.cfg.Store.EnvBuildOf(ctx, hash)
	if err != nil {
		return
	}
	if !ok {
		rec = store.EnvBuild{Hash: hash, Recipe: key, Image: id}
	}
	rec.Recipe = key
	rec.LastUsed = time.Now().UTC()
	if err := h.cfg.Store.PutEnvBuild(ctx, rec); err != nil {
		h.cfg.Logger.Warn().Err(err).Str("hash", hash).Msg("record environment use")
	}
}

// buildRecipe builds the image of e's recipe. It returns the image's ID,
// or why the build failed (with its output), or a fault.
func (h *Handler) buildRecipe(ctx context.Context, e store.Environment, l langs.Lang, base, hash, tag string) (string, string, error) {
	r := e.Recipe
	start := time.Now()
	var log strings.Builder
	fail := func(msg string) (string, string, error) {
		full := log.String()
		rec := store.EnvBuild{Hash: hash, Recipe: r.Key(), Error: msg, Log: full, TookMS: time.Since(start).Milliseconds(), Built: time.Now().UTC()}
		if err := h.cfg.Store.PutEnvBuild(ctx, rec); err != nil {
			h.cfg.Logger.Warn().Err(err).Str("hash", hash).Msg("record failed build")
		}
		const tail = 4 << 10
		if len(full) > tail {
			full = "[...]" + full[len(full)-tail:]
		}
		return "", fmt.Sprintf("environment %s: building its image failed: %s\n%s", r.Name, msg, full), nil
	}
	var req sandbox.BuildRequest
	var script []string
	if len(r.Packages) > 0 {
		fmt.Fprintf(&log, "sandq: downloading Debian packages: %s\n", strings.Join(r.Packages, " "))
		vol, dir, out, ok, err := h.downloadDebs(ctx, r, base, hash)
		log.WriteString(out)
		if err != nil {
			return "", "", err
		}
		if !ok {
			return fail("apt-get could not download the packages")
		}
		const mnt = "/mnt/sandq-debs"
		src := mnt + "/" + path.Base(dir)
		req.Mounts = append(req.Mounts, sandbox.BuildMount{Volume: vol, Target: mnt})
		apt := "apt-get -q -o APT::Sandbox::User=root -o Dpkg::Use-Pty=0"
		script = append(script,
			"echo 'sandq: installing Debian packages'",
			"mkdir -p /var/lib/apt/lists/partial /var/cache/apt/archives/partial",
			"cp -a "+src+"/lists/. /var/lib/apt/lists/",
			"cp "+src+"/archives/*.deb /var/cache/apt/archives/ 2>/dev/null || true",
			apt+" -y --no-download --no-install-recommends install "+strings.Join(r.Packages, " "),
			apt+" clean",
			"rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log",
		)
	}
	if len(r.Libraries) > 0 {
		if len(l.Install.Prepare("/x")) > 0 {
			return "", fmt.Sprintf("environment %s: libraries of %s cannot be built into an environment by this version (they need a step before each run); install them per job instead", r.Name, l.Name), nil
		}
		fmt.Fprintf(&log, "sandq: installing libraries: %s\n", strings.Join(r.Libraries, " "))
		set, ir, failed, err := h.installLibs(ctx, jobs.Job{Lang: r.Lang, Libraries: r.Libraries, Tenant: e.Tenant})
		if ir != nil && ir.Step != nil {
			log.WriteString(ir.Step.Output.Stdout)
			log.WriteString(ir.Step.Output.Stderr)
		}
		if err != nil {
			if errors.Is(err, errInfra) {
				return "", "", err
			}
			return fail(err.Error())
		}
		if failed != "" {
			return fail(failed)
		}
		const mnt = "/mnt/sandq-libs"
		req.Mounts = append(req.Mounts, sandbox.BuildMount{Volume: set.volume, Target: mnt})
		name := path.Base(set.dir)
		script = append(script,
			"echo 'sandq: copying the library set'",
			"mkdir -p "+sandbox.LibsDir,
			"cp -a "+mnt+"/"+name+" "+sandbox.LibsDir+"/",
			"chown -R 0:0 "+set.dir,
			"chmod -R a+rX,go-w "+set.dir,
		)
		req.Env = set.env
	}
	for _, f := range r.Files {
		req.Files = append(req.Files, sandbox.BuildFile{Path: f.Path, Content: []byte(f.Content)})
	}
	script = append(script, "echo 'sandq: committing'")
	cfg := h.cfg.Install
	mem := cfg.MemoryMB * jobs.MiB
	req.Base, req.Tag, req.Script = base, tag, strings.Join(script, "\n")
	req.Labels = map[string]string{sandbox.LabelEnvHash: hash, sandbox.LabelEnvName: r.Name, sandbox.LabelEnvTenant: e.Tenant,
		sandbox.LabelNamespace: h.cfg.Store.Prefix()}
	req.Limits = sandbox.ContainerLimits{MemoryBytes: mem, NanoCPUs: int64(cfg.CPUs * 1e9), Pids: 1024, TmpBytes: mem / 2,
		NoFile: 4096, FileSizeBytes: 1 << 30}
	req.Timeout = cfg.Timeout
	res, err := h.cfg.Sandbox.(envBuilder).BuildImage(ctx, req)
	if err != nil {
		return "", "", fmt.Errorf("%w: environment %s: %v", errInfra, r.Name, err)
	}
	log.WriteString(res.Log)
	if !res.OK {
		if res.TimedOut {
			return fail(fmt.Sprintf("the build exceeded the install time limit of %s", cfg.Timeout))
		}
		return fail(fmt.Sprintf("the build script exited with status %d", res.ExitCode))
	}
	rec := store.EnvBuild{Hash: hash, Recipe: r.Key(), Image: res.ImageID, Log: log.String(), TookMS: time.Since(start).Milliseconds(),
		Built: time.Now().UTC(), LastUsed: time.Now().UTC()}
	if err := h.cfg.Store.PutEnvBuild(ctx, rec); err != nil {
		h.cfg.Logger.Warn().Err(err).Str("hash", hash).Msg("record build")
	}
	h.cfg.Logger.Info().Str("environment", r.Name).Str("hash", hash[:12]).Dur("took", time.Since(start)).Msg("environment image built")
	return res.ImageID, "", nil
}

// downloadDebs downloads r's Debian packages, with their dependencies the
// base image lacks, into a fresh volume (sandq's install path, as the job
// uid, through the build egress). It returns the volume, the directory the
// lists and archives are in, the output, and whether apt-get succeeded.
func (h *Handler) downloadDebs(ctx context.Context, r jobs.Recipe, base, hash string) (string, string, string, bool, error) {
	eg, err := h.buildEgress()
	if err != nil {
		return "", "", "", false, err
	}
	cfg := h.cfg.Install
	mem := cfg.MemoryMB * jobs.MiB
	proxy := "http://" + sandbox.EgressProxy
	res, err := h.cfg.Sandbox.Install(ctx, sandbox.InstallRequest{
		Key: "debs-" + hash[:20], Namespace: h.cfg.Store.Prefix(), Image: base, MaxBytes: cfg.MaxMB * jobs.MiB, Timeout: cfg.Timeout,
		Egress: eg.Serve,
		Limits: sandbox.ContainerLimits{
			MemoryBytes: mem, NanoCPUs: int64(cfg.CPUs * 1e9), Pids: 1024, WorkDirBytes: 256 * jobs.MiB, TmpBytes: mem / 2,
			NoFile: 4096, FileSizeBytes: 1 << 30,
		},
		Steps: func(dir string) []agent.Step {
			o := []string{"-q", "-o", "Debug::NoLocking=1", "-o", "Dir::State::Lists=" + dir + "/lists",
				"-o", "Dir::Cache=" + dir + "/cache", "-o", "Dir::Cache::archives=" + dir + "/archives",
				"-o", "Acquire::http::Proxy=" + proxy, "-o", "Acquire::https::Proxy=" + proxy}
			st := func(name string, argv ...string) agent.Step {
				return agent.Step{Name: name, Argv: argv, Env: proxyEnv(sandbox.EgressProxy), Timeout: cfg.Timeout,
					OutputLimit: 256 * jobs.KiB, StopOnFailure: true, Rlimits: agent.Rlimits{NoFile: 4096, FileSize: 1 << 30}}
			}
			return []agent.Step{
				st("mkdir", "mkdir", "-p", dir+"/lists/partial", dir+"/archives/partial", dir+"/cache"),
				st("update", slices.Concat([]string{"apt-get"}, o, []string{"update"})...),
				st("install", slices.Concat([]string{"apt-get"}, o, []string{"-y", "--no-install-recommends", "--download-only", "install"}, r.Packages)...),
				st("clean", "rm", "-rf", dir+"/cache", dir+"/archives/partial", dir+"/lists/partial", dir+"/archives/lock", dir+"/lists/lock"),
			}
		},
	})
	if err == nil && !res.OK && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return "", "", "", false, fmt.Errorf("%w: download Debian packages: %w", errInfra, err)
	}
	var out strings.Builder
	for _, st := range res.Steps {
		out.Write(st.Stdout.Bytes())
		out.Write(st.Stderr.Bytes())
		if !st.OK() {
			fmt.Fprintf(&out, "sandq: step %s: exit status %d %s\n", st.Name, st.ExitCode, st.Error)
		}
	}
	if !res.OK && res.CommitError != "" {
		out.WriteString("sandq: " + res.CommitError + "\n")
	}
	return res.Volume, res.Dir, out.String(), res.OK, nil
}
