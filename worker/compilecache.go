package worker

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/sandbox"
)

// CompileCache keeps judged jobs' compiled work dirs on the worker's disk,
// content-addressed: a judged job (or its checker) whose compile request is
// identical to an earlier one of the same tenant (the image's ID, the
// steps' commands, environment and limits, every input file's path, mode
// and bytes) gets the work dir that compile left instead of compiling
// again. Only a compile that succeeded and whose work dir was collected
// whole is kept; jobs with libraries or a network policy are never cached
// (their compile depends on more than the request). An entry is one
// tenant's: another tenant never gets it, however identical its source.
//
// Bounded: at most MaxBytes in all, least recently used out first, and a
// tenant's entries at most MaxTenantBytes, its own least recently used out
// first, so a tenant compiling program after program evicts its own
// entries, not another's. The worker's directory is its own (cmd/worker
// makes it and removes it at exit); the index lives in memory.
type CompileCache struct {
	dir                      string
	maxBytes, maxTenantBytes int64
	maxEntryBytes            int64

	mu       sync.Mutex
	lru      *list.List // of *compiled, most recently used first
	entries  map[string]*list.Element
	used     int64
	byTenant map[string]int64
	hits     int64
	misses   int64
}

// compiled is one cache entry: the files of a compiled work dir (their
// contents in the cache dir, under the entry's key) and the compile
// step's record.
type compiled struct {
	key, tenant string
	files       []compiledFile
	step        agent.StepResult
	bytes       int64
}

type compiledFile struct {
	Path string
	Mode uint32
	Size int64
}

// maxCompiledBytes bounds one entry: a hit's files are read into the
// worker's memory and sent to the agent, so a tenant's 60 MiB binary (a
// large static array) would cost the worker that much per slot, where
// compiling it costs only the container. Compiled programs are far
// smaller (a Go binary about 2 MiB).
const maxCompiledBytes = 16 << 20

// NewCompileCache makes a cache in dir (which must exist and be the
// cache's alone) of at most maxBytes, a tenant's entries at most
// maxTenantBytes (0: a quarter of maxBytes).
func NewCompileCache(dir string, maxBytes, maxTenantBytes int64) (*CompileCache, error) {
	if maxBytes <= 0 {
		return nil, errors.New("worker: compile cache: the size bound must be positive")
	}
	if maxTenantBytes <= 0 || maxTenantBytes > maxBytes {
		maxTenantBytes = max(maxBytes/4, 1)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("worker: compile cache: %s is not a directory: %v", dir, err)
	}
	return &CompileCache{dir: dir, maxBytes: maxBytes, maxTenantBytes: maxTenantBytes,
		maxEntryBytes: min(maxTenantBytes, maxCompiledBytes),
		lru:           list.New(), entries: map[string]*list.Element{}, byTenant: map[string]int64{}}, nil
}

// CompileCacheStats is what a cache holds and how often it served.
type CompileCacheStats struct {
	Entries      int   `json:"entries"`
	Bytes        int64 `json:"bytes"`
	Hits, Misses int64
}

// Stats reports the cache's size and hit counts.
func (c *CompileCache) Stats() CompileCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CompileCacheStats{Entries: c.lru.Len(), Bytes: c.used, Hits: c.hits, Misses: c.misses}
}

// compileKey is the content address of a compile request: everything the
// compile's outcome depends on but the toolchain's own determinism.
func compileKey(tenant, imageID string, spec sandbox.Spec, req *agent.RunRequest) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	str := func(s string) { field([]byte(s)) }
	num := func(v int64) { str(fmt.Sprint(v)) }
	str("sandq-compile-v1")
	str(tenant)
	str(imageID)
	str(spec.Image)
	str(spec.Agent)
	str(spec.Volume)
	str(fmt.Sprintf("%+v", spec.Limits))
	num(req.MemoryLimit)
	num(int64(req.Timeout))
	files := slices.Clone(req.Files)
	slices.SortFunc(files, func(a, b agent.File) int { return cmp.Compare(a.Path, b.Path) })
	num(int64(len(files)))
	for _, f := range files {
		str(f.Path)
		num(int64(f.Mode))
		field(f.Data)
	}
	num(int64(len(req.Steps)))
	for _, st := range req.Steps {
		str(st.Name)
		num(int64(len(st.Argv)))
		for _, a := range st.Argv {
			str(a)
		}
		env := slices.Clone(st.Env)
		slices.Sort(env)
		num(int64(len(env)))
		for _, e := range env {
			str(e)
		}
		num(int64(st.Timeout))
		num(int64(st.OutputLimit))
		num(int64(st.Rlimits.NoFile))
		num(int64(st.Rlimits.FileSize))
		num(int64(st.Rlimits.CPU))
		num(int64(st.Rlimits.Stack))
		field(st.Stdin)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// get returns key's files (read from disk) and compile record, if tenant
// has them.
func (c *CompileCache) get(key, tenant string) ([]agent.File, agent.StepResult, bool) {
	c.mu.Lock()
	el, ok := c.entries[key]
	if !ok || el.Value.(*compiled).tenant != tenant {
		c.misses++
		c.mu.Unlock()
		return nil, agent.StepResult{}, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*compiled)
	c.mu.Unlock()
	files := make([]agent.File, 0, len(e.files))
	for i, f := range e.files {
		data, err := os.ReadFile(c.path(key, i))
		if err != nil || int64(len(data)) != f.Size {
			c.drop(key)
			c.mu.Lock()
			c.misses++
			c.mu.Unlock()
			return nil, agent.StepResult{}, false
		}
		files = append(files, agent.File{Path: f.Path, Mode: f.Mode, Data: data})
	}
	c.mu.Lock()
	c.hits++
	c.mu.Unlock()
	return files, e.step, true
}

func (c *CompileCache) path(key string, i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s.%d", key, i))
}

// put keeps a compile's collected work dir (its artifacts' received
// files, copied) under key for tenant.
func (c *CompileCache) put(key, tenant string, arts []agent.Artifact, step agent.StepResult) error {
	step = stepRecord(step)
	size := int64(len(step.Stdout.Head) + len(step.Stdout.Tail) + len(step.Stderr.Head) + len(step.Stderr.Tail))
	for _, a := range arts {
		size += a.Size
	}
	if size > c.maxEntryBytes {
		return nil
	}
	c.mu.Lock()
	_, have := c.entries[key]
	c.mu.Unlock()
	if have {
		return nil
	}
	e := &compiled{key: key, tenant: tenant, bytes: size, step: step}
	for i, a := range arts {
		if err := copyFile(a.File, c.path(key, i)); err != nil {
			for j := range i + 1 {
				_ = os.Remove(c.path(key, j))
			}
			return err
		}
		e.files = append(e.files, compiledFile{Path: a.Name, Mode: a.Mode, Size: a.Size})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, have := c.entries[key]; have { // a concurrent put of the same compile
		return nil
	}
	c.entries[key] = c.lru.PushFront(e)
	c.used += size
	c.byTenant[tenant] += size
	var evict []*compiled
	for el := c.lru.Back(); el != nil && c.byTenant[tenant] > c.maxTenantBytes; {
		prev := el.Prev()
		if v := el.Value.(*compiled); v.tenant == tenant && v.key != key {
			evict = append(evict, c.unlink(el))
		}
		el = prev
	}
	for el := c.lru.Back(); el != nil && c.used > c.maxBytes; {
		prev := el.Prev()
		if el.Value.(*compiled).key != key {
			evict = append(evict, c.unlink(el))
		}
		el = prev
	}
	for _, v := range evict {
		c.removeFiles(v)
	}
	return nil
}

// unlink removes el from the index (c.mu held) and returns its entry.
func (c *CompileCache) unlink(el *list.Element) *compiled {
	v := c.lru.Remove(el).(*compiled)
	delete(c.entries, v.key)
	c.used -= v.bytes
	if c.byTenant[v.tenant] -= v.bytes; c.byTenant[v.tenant] <= 0 {
		delete(c.byTenant, v.tenant)
	}
	return v
}

func (c *CompileCache) removeFiles(v *compiled) {
	for i := range v.files {
		_ = os.Remove(c.path(v.key, i))
	}
}

// drop forgets key (its files unreadable).
func (c *CompileCache) drop(key string) {
	c.mu.Lock()
	el, ok := c.entries[key]
	var v *compiled
	if ok {
		v = c.unlink(el)
	}
	c.mu.Unlock()
	if v != nil {
		c.removeFiles(v)
	}
}

// stepRecord is a step's result as the cache keeps it: its output's head
// and tail copied out of the run's buffers.
func stepRecord(st agent.StepResult) agent.StepResult {
	for _, o := range []*agent.Output{&st.Stdout, &st.Stderr} {
		o.Head, o.Tail = bytes.Clone(o.Head), bytes.Clone(o.Tail)
	}
	return st
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// compileRun runs req, the files and compile steps of a judged job or its
// checker, through run; or, when the worker's compile cache holds the
// same tenant's identical compile, writes the work dir that compile left
// and reports its compile record instead (cached true). cacheable says
// whether the job's compile depends on the request alone (no libraries,
// no network policy).
func (h *Handler) compileRun(ctx context.Context, run sandbox.RunFunc, tenant string, spec sandbox.Spec, req *agent.RunRequest, cacheable bool) (agent.RunResult, bool, error) {
	c := h.cfg.CompileCache
	if c == nil || !cacheable || !slices.ContainsFunc(req.Steps, func(s agent.Step) bool { return s.Name == "compile" }) || req.Collect != nil {
		out, err := run(ctx, req)
		return out, false, err
	}
	imageID, err := h.imageIDs.get(ctx, h.cfg.Sandbox, spec.Image)
	if err != nil {
		out, err := run(ctx, req)
		return out, false, err
	}
	key := compileKey(tenant, imageID, spec, req)
	if files, step, ok := c.get(key, tenant); ok {
		out, err := run(ctx, &agent.RunRequest{Files: files, MemoryLimit: req.MemoryLimit, Timeout: req.Timeout})
		if err != nil || out.FilesError != "" {
			return out, false, err
		}
		out.Steps = []agent.StepResult{step}
		return out, true, nil
	}
	withCollect := *req
	withCollect.Collect = &agent.Collect{Globs: []string{"**"}, MaxFiles: 1024, MaxBytes: c.maxEntryBytes}
	out, err := run(ctx, &withCollect)
	if err != nil {
		out.RemoveFiles()
		return out, false, err
	}
	if out.FilesError == "" && len(out.Dropped) == 0 && len(out.Steps) == len(req.Steps) && out.Last().OK() {
		if err := c.put(key, tenant, out.Artifacts, out.Last()); err != nil {
			h.cfg.Logger.Warn().Err(err).Msg("compile cache: keep a compile")
		}
	}
	out.RemoveFiles()
	out.Artifacts, out.Dropped = nil, nil
	return out, false, nil
}
