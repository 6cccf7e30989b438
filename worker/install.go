package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/sandq/sandq/internal/store"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// InstallConfig configures library installs; see [Config].
type InstallConfig struct {
	// Mirrors are where installers download from. Zero fields: the public
	// registries (langs.DefaultMirrors).
	Mirrors langs.Mirrors
	// CABundle is a PEM bundle that install steps trust instead of the
	// image's (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, PIP_CERT and the like):
	// for registries behind a TLS-intercepting proxy, or private ones.
	// Nil: the image's own trust store.
	CABundle []byte
	// Timeout bounds an install, all its commands together (an install
	// that passes it ends the job failed, with the installer's output).
	// Default 5 min; at most store.MaxInstallTimeout.
	Timeout time.Duration
	// MemoryMB sizes the install container (memory and the /tmp tmpfs,
	// where package managers unpack). Default 2048.
	MemoryMB int64
	// CPUs is the install container's CPU quota. Default 1.
	CPUs float64
	// MaxMB caps an installed set's size on disk. Default 2048.
	MaxMB int64
	// DebianHosts are the "host:port" pairs of the Debian mirror that
	// environment builds (recipes with packages) reach through the egress
	// proxy, besides the mirrors: job installs never do. Default
	// DefaultDebianHosts (deb.debian.org, as sandq's images' apt sources).
	DebianHosts []string
	// AllowHosts are "host:port" pairs installs may reach besides the
	// mirrors (and the hosts the public registries send downloads to).
	AllowHosts []string
	// TenantQuota is told of each set installed for a tenant (not found
	// in the cache), to bring the tenant's sets back within its disk quota
	// (LibsCollector.TrimTenant, which keeps the new set). Nil: only the
	// collector's periodic pass bounds them.
	TenantQuota func(ctx context.Context, tenant, volume string)
}

func (c InstallConfig) withDefaults() InstallConfig {
	c.Mirrors = c.Mirrors.WithDefaults()
	c.Timeout = min(cmp.Or(c.Timeout, 5*time.Minute), store.MaxInstallTimeout)
	c.MemoryMB = cmp.Or(c.MemoryMB, 2048)
	c.CPUs = cmp.Or(c.CPUs, 1)
	c.MaxMB = cmp.Or(c.MaxMB, 2048)
	return c
}

// installCAPath is where the CA bundle is written in the install
// container (its work dir, /work).
const installCAPath = ".sandq/ca.pem"

func caEnv(path string) []string {
	return []string{
		"SSL_CERT_FILE=" + path, "NODE_EXTRA_CA_CERTS=" + path, "PIP_CERT=" + path,
		"REQUESTS_CA_BUNDLE=" + path, "CURL_CA_BUNDLE=" + path, "GIT_SSL_CAINFO=" + path,
	}
}

// proxyEnv points every installer at the egress proxy: the install
// container has no other way out.
func proxyEnv(addr string) []string {
	host, port, _ := strings.Cut(addr, ":")
	u := "http://" + addr
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy=",
		"npm_config_proxy=" + u, "npm_config_https_proxy=" + u,
		"JAVA_TOOL_OPTIONS=-Dhttp.proxyHost=" + host + " -Dhttp.proxyPort=" + port +
			" -Dhttps.proxyHost=" + host + " -Dhttps.proxyPort=" + port + " -Dhttp.nonProxyHosts=",
	}
}

// imageIDs caches image IDs per image name: part of every set's key, so a
// rebuilt image gets its libraries installed anew.
type imageIDs struct {
	mu  sync.Mutex
	ids map[string]string
	at  map[string]time.Time
}

func (c *imageIDs) get(ctx context.Context, sb Sandbox, image string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.ids[image]; ok && time.Since(c.at[image]) < time.Minute {
		return id, nil
	}
	id, err := sb.ImageID(ctx, image)
	if err != nil {
		return "", err
	}
	if c.ids == nil {
		c.ids, c.at = map[string]string{}, map[string]time.Time{}
	}
	c.ids[image], c.at[image] = id, time.Now()
	return id, nil
}

// libs is an installed set, ready for the run: its volume, the
// environment the compile and run steps need, and commands to run before
// them.
type libs struct {
	volume  string
	dir     string // the set's directory (under sandbox.LibsDir)
	env     []string
	prepare [][]string
}

// installLibs makes job's libraries available. It returns the set, the
// InstallResult for the job's Result, and, when the installer failed, the
// reason (the job then ends "failed"). An error wrapping errInfra is an
// infrastructure fault (or the worker's shutdown); any other error is the
// job's (rejected).
func (h *Handler) installLibs(ctx context.Context, job jobs.Job) (libs, *jobs.InstallResult, string, error) {
	lang, _ := langs.Lookup(job.Lang)
	in := lang.Install
	if in == nil { // Validate rejects these; a second line of defence
		return libs{}, nil, "", fmt.Errorf("libraries: %s has no package manager in sandq; libraries are not supported for it", lang.Name)
	}
	cfg := h.cfg.Install
	names := slices.Compact(slices.Sorted(slices.Values(job.Libraries)))
	image := lang.Image(h.cfg.ImagePrefix)
	imageID, err := h.imageIDs.get(ctx, h.cfg.Sandbox, image)
	if err != nil {
		return libs{}, nil, "", fmt.Errorf("%w: %w", errInfra, err)
	}
	// The key covers what decides the installed files: the image, and the
	// commands with every name, flag and mirror in them; and the tenant,
	// whose sets are their own, as its containers are.
	sum := sha256.New()
	fmt.Fprintf(sum, "%s\x00%s\x00%s\x00", imageID, in.Tool, job.Tenant)
	for _, c := range in.Commands("/staging", names, cfg.Mirrors) {
		fmt.Fprintf(sum, "%q%q\x00", c.Argv, c.Env)
	}
	for p, b := range in.Files() {
		fmt.Fprintf(sum, "%s\x00%x\x00", p, sha256.Sum256(b))
	}
	key := lang.Name + "-" + hex.EncodeToString(sum.Sum(nil))[:20]

	var files []agent.File
	var env []string
	for p, b := range in.Files() {
		files = append(files, agent.File{Path: p, Data: b})
	}
	if len(cfg.CABundle) > 0 {
		files = append(files, agent.File{Path: installCAPath, Data: cfg.CABundle})
		env = caEnv("/work/" + installCAPath)
	}
	env = append(env, proxyEnv(sandbox.EgressProxy)...)
	mem := cfg.MemoryMB * jobs.MiB
	res, err := h.cfg.Sandbox.Install(ctx, sandbox.InstallRequest{
		Key: key, Namespace: h.cfg.Store.Prefix(), Image: image, Files: files, MaxBytes: cfg.MaxMB * jobs.MiB, Timeout: cfg.Timeout,
		Egress: h.egress.Serve,
		Limits: sandbox.ContainerLimits{
			MemoryBytes: mem, NanoCPUs: int64(cfg.CPUs * 1e9), Pids: 1024, WorkDirBytes: 256 * jobs.MiB, TmpBytes: mem / 2,
			NoFile: 4096, FileSizeBytes: 1 << 30,
		},
		Steps: func(dir string) []agent.Step {
			var steps []agent.Step
			for _, c := range in.Commands(dir, names, cfg.Mirrors) {
				steps = append(steps, agent.Step{
					Name: c.Name, Argv: c.Argv, Env: append(slices.Clone(env), c.Env...),
					Timeout: cfg.Timeout, OutputLimit: 256 * jobs.KiB, StopOnFailure: !c.Optional,
					Rlimits: agent.Rlimits{NoFile: 4096, FileSize: 1 << 30},
				})
			}
			return steps
		},
	})
	if err == nil && !res.OK && ctx.Err() != nil {
		err = context.Cause(ctx) // the installer was stopped: not its fault
	}
	if err != nil {
		return libs{}, nil, "", fmt.Errorf("%w: install libraries: %w", errInfra, err)
	}
	ir := &jobs.InstallResult{Cached: res.Cached, TookMS: res.Took.Milliseconds(), Volume: res.Volume}
	// The step to report: on failure the one that failed (the last), on
	// success the package manager's own.
	var last agent.StepResult
	for i := len(res.Steps) - 1; i >= 0; i-- {
		last = res.Steps[i]
		if !res.OK || last.Name == "install" {
			break
		}
	}
	if len(res.Steps) > 0 {
		sr := &jobs.StepResult{Usage: usage(last), Output: output(last)}
		sr.ExitCode, sr.Signal = exit(last)
		ir.Step = sr
	}
	if !res.OK {
		return libs{}, ir, installFailure(in.Tool, last, res.CommitError, cfg.Timeout), nil
	}
	if err := h.cfg.Store.UseLibs(ctx, res.Volume, job.Tenant, res.Bytes); err != nil {
		h.cfg.Logger.Warn().Err(err).Str("volume", res.Volume).Msg("record library set use")
	}
	if !res.Cached && cfg.TenantQuota != nil {
		cfg.TenantQuota(ctx, job.Tenant, res.Volume)
	}
	return libs{volume: res.Volume, dir: res.Dir, env: in.Env(res.Dir), prepare: in.Prepare(res.Dir)}, ir, "", nil
}

// installFailure is the reason of a job whose install failed.
func installFailure(tool string, st agent.StepResult, commitErr string, timeout time.Duration) string {
	const see = " (the installer's output is in install.step)"
	switch {
	case st.OK() && commitErr != "":
		return "installing libraries failed: " + commitErr
	case !st.Started:
		return fmt.Sprintf("installing libraries failed: %s could not start: %s", tool, st.Error)
	case st.TimedOut:
		return fmt.Sprintf("installing libraries failed: %s exceeded the install time limit of %s", tool, timeout) + see
	case st.OOMKilled:
		return fmt.Sprintf("installing libraries failed: %s was killed by the OOM killer", tool) + see
	case st.Signal != 0:
		return fmt.Sprintf("installing libraries failed: %s was killed by signal %d", tool, st.Signal) + see
	}
	return fmt.Sprintf("installing libraries failed: %s exited with status %d", tool, st.ExitCode) + see
}
