package jobs

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Size units.
const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// Path rules shared by input files and output globs.
const (
	maxPathBytes      = 1024
	maxPathComponent  = 255
	maxKeyBytes       = 1024
	maxIDBytes        = 128
	maxTenantBytes    = 64
	maxTagKeyBytes    = 64
	maxTagValueBytes  = 256
	maxLibraryBytes   = 256
	defaultMaxRetry   = DefaultMaxRetry
	defaultRetryCap   = 10
	defaultMaxFiles   = 100
	defaultMaxOutputs = 64
	defaultMaxLibs    = 32
	defaultMaxTags    = 32
)

// DefaultMaxRetry is the retry budget for infrastructure faults of a job
// that sets no max_retry, under a policy that sets no DefaultMaxRetry.
const DefaultMaxRetry = 3

// Policy is the operator's view of what a job may ask for: the languages
// on offer, size caps, the default limits a job gets when it leaves a limit
// zero and the caps no job may exceed. The zero Policy is the default
// policy; every zero field takes the default named in its comment.
//
// The producer ([Client]) and the worker each validate with their own
// Policy; the worker's is the one that counts.
type Policy struct {
	// Languages are the languages on offer. Required: the language
	// registry makes them (langs.Catalog); a Policy without languages
	// refuses every job, naming none.
	Languages []Language

	// MaxCodeBytes caps len(Job.Code). Default 1 MiB.
	MaxCodeBytes int64

	// MaxStdinBytes caps len(Job.Stdin). Default 1 MiB.
	MaxStdinBytes int64

	// MaxInlineFileBytes caps the total inline content of Job.Files.
	// Default 10 MiB.
	MaxInlineFileBytes int64

	// MaxFiles caps len(Job.Files). Default 100.
	MaxFiles int

	// MaxOutputFiles caps len(Job.OutputFiles). Default 64.
	MaxOutputFiles int

	// MaxLibraries caps len(Job.Libraries). Default 32.
	MaxLibraries int

	// MaxTags caps len(Job.Tags). Default 32.
	MaxTags int

	// MaxArgEnvBytes caps the summed bytes of Job.Args and Job.Env keys
	// and values. Default 256 KiB.
	MaxArgEnvBytes int64

	// MaxLimits are the caps of each limit; a job asking for more is
	// rejected. Zero fields default to: timeout 300 000 ms (5 min), memory
	// 4096 MiB, cpus 4, pids 512, output 16 MiB, disk 1024 MiB, tmp 1024 MiB,
	// nofile 4096, file size 1024 MiB.
	MaxLimits Limits

	// DefaultLimits are the limits of a job that leaves a limit zero. Zero
	// fields default to: timeout 10 000 ms, memory 256 MiB, cpus 1, pids 128,
	// output 1 MiB, disk 256 MiB, tmp 64 MiB, nofile 256, file size 64 MiB
	// (each lowered to its cap if the cap is smaller).
	DefaultLimits Limits

	// DefaultMaxRetry is the retry budget for infrastructure faults of a
	// job that does not set max_retry. Default 3; negative means 0.
	DefaultMaxRetry int

	// MaxRetryCap caps Job.MaxRetry. Default 10.
	MaxRetryCap int

	// MaxTests caps len(Job.Tests). Default MaxTestCases (1,000).
	MaxTests int

	// MaxTestBytes caps the summed bytes of the tests' inline inputs and
	// expected outputs. Default 16 MiB.
	MaxTestBytes int64

	// NetworkAllow are the destinations a job's network policy may list
	// (Job.Network), as "host:port" entries ([Destination]; "*:port" allows
	// every DNS name on that port): the operator's --run-allow-hosts. A
	// job's entry must be within one of them. Nil (the default): no job
	// may ask for a network.
	NetworkAllow []string

	// MaxNetworkAllow caps len(Job.Network.Allow). Default
	// DefaultMaxNetworkAllow (32).
	MaxNetworkAllow int
	// ImageAllow are the operator's --image-allow patterns: the images a
	// job may name as its environment ("image:REF"; see ImageAllowed).
	// They are enforced only where the operator's configuration is known,
	// CheckImages set (the workers, the API); there none means no image
	// is allowed. A client without them checks the syntax only.
	ImageAllow  []string
	CheckImages bool
}

// WithDefaults returns a copy of p with every zero field set to its
// default.
func (p Policy) WithDefaults() Policy {
	p.MaxCodeBytes = cmp.Or(p.MaxCodeBytes, 1*MiB)
	p.MaxStdinBytes = cmp.Or(p.MaxStdinBytes, 1*MiB)
	p.MaxInlineFileBytes = cmp.Or(p.MaxInlineFileBytes, 10*MiB)
	p.MaxFiles = cmp.Or(p.MaxFiles, defaultMaxFiles)
	p.MaxOutputFiles = cmp.Or(p.MaxOutputFiles, defaultMaxOutputs)
	p.MaxLibraries = cmp.Or(p.MaxLibraries, defaultMaxLibs)
	p.MaxTags = cmp.Or(p.MaxTags, defaultMaxTags)
	p.MaxArgEnvBytes = cmp.Or(p.MaxArgEnvBytes, 256*KiB)
	for _, f := range LimitTable {
		if f.Get(&p.MaxLimits) == 0 {
			f.Set(&p.MaxLimits, f.Cap)
		}
		if f.Get(&p.DefaultLimits) == 0 {
			f.Set(&p.DefaultLimits, min(f.Default, f.Get(&p.MaxLimits)))
		}
	}
	p.DefaultMaxRetry = cmp.Or(p.DefaultMaxRetry, defaultMaxRetry)
	p.DefaultMaxRetry = max(p.DefaultMaxRetry, 0)
	p.MaxRetryCap = cmp.Or(p.MaxRetryCap, defaultRetryCap)
	p.MaxTests = cmp.Or(p.MaxTests, MaxTestCases)
	p.MaxTestBytes = cmp.Or(p.MaxTestBytes, 16*MiB)
	p.MaxNetworkAllow = cmp.Or(p.MaxNetworkAllow, DefaultMaxNetworkAllow)
	return p
}

// Check reports what in a policy (its defaults filled) contradicts itself:
// no languages, a default above its cap or below its minimum, and the like.
func (p Policy) Check() error {
	if len(p.Languages) == 0 {
		return fmt.Errorf("jobs: policy: Languages is empty (langs.Catalog has sandq's)")
	}
	seen := map[string]string{}
	for _, l := range p.Languages {
		for _, name := range append([]string{l.Name}, l.Aliases...) {
			switch {
			case name == "":
				return fmt.Errorf("jobs: policy: language %q has an empty name", l.Name)
			case name != strings.ToLower(name):
				return fmt.Errorf("jobs: policy: language name %q is not lowercase", name)
			case seen[name] != "":
				return fmt.Errorf("jobs: policy: %q names both %s and %s", name, seen[name], l.Name)
			}
			seen[name] = l.Name
		}
	}
	for _, f := range LimitTable {
		maxv, def := f.Get(&p.MaxLimits), f.Get(&p.DefaultLimits)
		if !(maxv >= 0) || !(def >= 0) { // negative or NaN
			return fmt.Errorf("jobs: policy: limits.%s is negative (default %s, cap %s)", f.Name, formatNum(def), formatNum(maxv))
		}
		if def > maxv {
			return fmt.Errorf("jobs: policy: default limits.%s %s %s exceeds the cap %s", f.Name, formatNum(def), f.Unit, formatNum(maxv))
		}
		if def < f.Min {
			return fmt.Errorf("jobs: policy: default limits.%s %s %s is below the minimum %s", f.Name, formatNum(def), f.Unit, formatNum(f.Min))
		}
	}
	if p.DefaultMaxRetry > p.MaxRetryCap {
		return fmt.Errorf("jobs: policy: DefaultMaxRetry %d exceeds MaxRetryCap %d", p.DefaultMaxRetry, p.MaxRetryCap)
	}
	if _, err := ParseAllowList(p.NetworkAllow); err != nil {
		return fmt.Errorf("jobs: policy: NetworkAllow: %w", err)
	}
	if err := CheckImagePatterns(p.ImageAllow); err != nil {
		return fmt.Errorf("jobs: policy: %w", err)
	}
	return nil
}

// ValidationError reports the first rule a job breaks. Field is the JSON
// path of the offending value, such as "limits.memory_mb" or
// "files[2].path"; Msg says what is wrong with it, naming the value and the
// bound it broke. Match it with errors.As.
type ValidationError struct {
	// Field is the JSON path of the offending value; empty for the job as a
	// whole.
	Field string
	// Msg is the human-readable rule that was broken.
	Msg string
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "jobs: invalid job: " + e.Msg
	}
	return "jobs: invalid job: " + e.Field + ": " + e.Msg
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks j against the policy and returns a *ValidationError for
// the first rule it breaks, or nil. Zero fields are valid (they take
// defaults in [Policy.Normalize]). Validate does not modify j and does no
// I/O. The policy itself is not checked ([Policy.Check] does).
func (p Policy) Validate(j *Job) error {
	p = p.WithDefaults()
	if j.ID != "" {
		if msg := CheckName(j.ID, maxIDBytes); msg != "" {
			return invalid("id", "%s", msg)
		}
	}
	if j.Tenant != "" {
		if msg := CheckName(j.Tenant, maxTenantBytes); msg != "" {
			return invalid("tenant", "%s", msg)
		}
	}
	if _, ok := p.lookupLang(j.Lang); !ok {
		if j.Lang == "" {
			return invalid("lang", "is empty; supported: %s", strings.Join(p.langNames(), ", "))
		}
		return invalid("lang", "unknown language %q; supported: %s", j.Lang, strings.Join(p.langNames(), ", "))
	}
	if strings.TrimSpace(j.Code) == "" {
		return invalid("code", "is empty")
	}
	if n := int64(len(j.Code)); n > p.MaxCodeBytes {
		return invalid("code", "is %d bytes; the cap is %s", n, formatSize(p.MaxCodeBytes))
	}
	if n := int64(len(j.Stdin)); n > p.MaxStdinBytes {
		return invalid("stdin", "is %d bytes; the cap is %s", n, formatSize(p.MaxStdinBytes))
	}
	switch j.Queue {
	case "", QueueCritical, QueueDefault, QueueBatch:
	default:
		return invalid("queue", "unknown queue %q; use critical, default or batch", j.Queue)
	}
	switch j.Isolation {
	case "", IsolationReuse, IsolationFresh:
	default:
		return invalid("isolation", "unknown isolation %q; use reuse or fresh", j.Isolation)
	}
	if err := p.validateEnvironment(j.Environment); err != nil {
		return err
	}
	if j.Environment != "" && len(j.Libraries) > 0 {
		return invalid("libraries", "are not installed in an environment (%s): the image holds what the job needs", j.Environment)
	}
	if err := p.validateNetwork(j.Network); err != nil {
		return err
	}
	if j.MaxRetry != nil {
		if n := *j.MaxRetry; n < 0 {
			return invalid("max_retry", "is %d; must be >= 0", n)
		} else if n > p.MaxRetryCap {
			return invalid("max_retry", "%d exceeds the operator cap %d", n, p.MaxRetryCap)
		}
	}
	if err := p.validateLimits(&j.Limits); err != nil {
		return err
	}
	if err := p.validateArgsEnv(j); err != nil {
		return err
	}
	if err := p.validateFiles(j.Files); err != nil {
		return err
	}
	if err := p.validateSourceName(j.Lang, j.Files); err != nil {
		return err
	}
	if err := p.validateOutputFiles(j.OutputFiles); err != nil {
		return err
	}
	if err := validatePlotFormats(j.PlotFormats); err != nil {
		return err
	}
	if err := p.validateLibraries(j.Lang, j.Libraries); err != nil {
		return err
	}
	if err := p.validateLangOptions(j.Lang, j.Env); err != nil {
		return err
	}
	if j.Network != nil && len(j.Tests) > 0 {
		return invalid("network", "a judged job (tests) runs without network")
	}
	if len(j.Tests) > 0 && j.Stdin != "" {
		return invalid("stdin", "is set on a judged job; each test case has its own stdin")
	}
	if err := p.validateTests(j); err != nil {
		return err
	}
	if err := validateTrace(j); err != nil {
		return err
	}
	return p.validateTags(j.Tags)
}

func (p Policy) validateLimits(l *Limits) error {
	for _, f := range LimitTable {
		v, maxv, def := f.Get(l), f.Get(&p.MaxLimits), f.Get(&p.DefaultLimits)
		field := "limits." + f.Name
		switch {
		case v != v || v < 0: // NaN or negative
			return invalid(field, "is %s; must be >= 0 (0 means the operator default, %s %s)", formatNum(v), formatNum(def), f.Unit)
		case v > maxv:
			return invalid(field, "%s %s exceeds the operator cap %s %s", formatNum(v), f.Unit, formatNum(maxv), f.Unit)
		case v != 0 && v < f.Min:
			return invalid(field, "%s %s is below the minimum %s %s", formatNum(v), f.Unit, formatNum(f.Min), f.Unit)
		}
	}
	return nil
}

func (p Policy) validateArgsEnv(j *Job) error {
	var total int64
	for i, a := range j.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid(fmt.Sprintf("args[%d]", i), "contains a NUL byte")
		}
		total += int64(len(a))
	}
	for _, k := range slices.Sorted(maps.Keys(j.Env)) {
		if !isEnvName(k) {
			return invalid("env", "key %q is not a valid name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if strings.IndexByte(j.Env[k], 0) >= 0 {
			return invalid("env."+k, "contains a NUL byte")
		}
		total += int64(len(k) + len(j.Env[k]))
	}
	if total > p.MaxArgEnvBytes {
		return invalid("args", "args and env total %d bytes; the cap is %s", total, formatSize(p.MaxArgEnvBytes))
	}
	return nil
}

func (p Policy) validateFiles(files []File) error {
	if len(files) > p.MaxFiles {
		return invalid("files", "has %d entries; the cap is %d", len(files), p.MaxFiles)
	}
	var inline int64
	seen := make(map[string]int, len(files)) // cleaned path → index
	dirs := make(map[string]int)             // implied directory → first index needing it
	for i, f := range files {
		field := fmt.Sprintf("files[%d]", i)
		clean, msg := checkRelPath(f.Path, false)
		if msg != "" {
			return invalid(field+".path", "%s", msg)
		}
		if j, ok := seen[clean]; ok {
			return invalid(field+".path", "%q names the same file as files[%d].path %q", f.Path, j, files[j].Path)
		}
		if j, ok := dirs[clean]; ok {
			return invalid(field+".path", "%q is a directory of files[%d].path %q", f.Path, j, files[j].Path)
		}
		for d := path.Dir(clean); d != "."; d = path.Dir(d) {
			if j, ok := seen[d]; ok {
				return invalid(field+".path", "%q is inside files[%d].path %q, which is a file", f.Path, j, files[j].Path)
			}
			if _, ok := dirs[d]; !ok {
				dirs[d] = i
			}
		}
		seen[clean] = i
		if len(f.ContentB64) > 0 && f.Key != "" {
			return invalid(field, "sets both content_b64 and key; set one")
		}
		if len(f.Key) > maxKeyBytes {
			return invalid(field+".key", "is %d bytes; the cap is %d", len(f.Key), maxKeyBytes)
		}
		if f.Key != "" {
			if msg := checkInputKey(f.Key); msg != "" {
				return invalid(field+".key", "%s", msg)
			}
		}
		if f.Mode&^0o777 != 0 {
			return invalid(field+".mode", "%O has bits outside 0o777 (setuid, setgid and sticky are refused)", f.Mode)
		}
		inline += int64(len(f.ContentB64))
	}
	if inline > p.MaxInlineFileBytes {
		return invalid("files", "inline content totals %d bytes; the cap is %s", inline, formatSize(p.MaxInlineFileBytes))
	}
	return nil
}

// validateSourceName refuses an input file that would take the place of
// the program's own source file (main.py for python).
func (p Policy) validateSourceName(lang string, files []File) error {
	l, ok := lookup(p.Languages, lang)
	if !ok || l.Source == "" {
		return nil
	}
	for i, f := range files {
		if path.Clean(f.Path) == l.Source {
			return invalid(fmt.Sprintf("files[%d].path", i), "%q is where %s jobs' code is written; give the file another name", f.Path, l.Name)
		}
	}
	return nil
}

func (p Policy) validateOutputFiles(globs []string) error {
	if len(globs) > p.MaxOutputFiles {
		return invalid("output_files", "has %d entries; the cap is %d", len(globs), p.MaxOutputFiles)
	}
	for i, g := range globs {
		if _, msg := checkRelPath(g, true); msg != "" {
			return invalid(fmt.Sprintf("output_files[%d]", i), "%s", msg)
		}
		if err := ValidGlob(g); err != nil {
			return invalid(fmt.Sprintf("output_files[%d]", i), "%v", err)
		}
	}
	return nil
}

func validatePlotFormats(formats []string) error {
	for i, f := range formats {
		if f != "png" && f != "svg" {
			return invalid(fmt.Sprintf("plot_formats[%d]", i), "%q is not a plot format; use png or svg", f)
		}
	}
	return nil
}

// validateLangOptions checks the env variables that pick a variant of the
// language's toolchain ([Language.Options]) against their values.
func (p Policy) validateLangOptions(lang string, env map[string]string) error {
	l, ok := lookup(p.Languages, lang)
	if !ok {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(l.Options)) {
		if v, set := env[k]; set && !slices.Contains(l.Options[k], v) {
			return invalid("env."+k, "is %q; %s accepts %s", v, l.Name, strings.Join(l.Options[k], " or "))
		}
	}
	return nil
}

// validateLibraries checks each name against the language's package
// manager's grammar ([Language.Libraries]): a name is never an option, a
// URL, a path or a shell fragment.
func (p Policy) validateLibraries(lang string, libs []string) error {
	if len(libs) == 0 {
		return nil
	}
	if len(libs) > p.MaxLibraries {
		return invalid("libraries", "has %d entries; the cap is %d", len(libs), p.MaxLibraries)
	}
	var check func(string) error
	if l, ok := lookup(p.Languages, lang); ok {
		if l.Libraries == nil {
			return invalid("libraries", "%s has no package manager in sandq; libraries are not supported for it", l.Name)
		}
		check = l.Libraries
	}
	for i, l := range libs {
		field := fmt.Sprintf("libraries[%d]", i)
		switch {
		case l == "":
			return invalid(field, "is empty")
		case len(l) > maxLibraryBytes:
			return invalid(field, "is %d bytes; the cap is %d", len(l), maxLibraryBytes)
		case strings.HasPrefix(l, "-"):
			return invalid(field, "%q starts with '-'; options are not accepted", l)
		case strings.ContainsFunc(l, func(r rune) bool { return r <= ' ' || r == 0x7f }) || !utf8.ValidString(l):
			return invalid(field, "%q contains whitespace, control characters or invalid UTF-8", l)
		}
		if check != nil {
			if err := check(l); err != nil {
				return invalid(field, "%v", err)
			}
		}
	}
	return nil
}

func (p Policy) validateTags(tags map[string]string) error {
	if len(tags) > p.MaxTags {
		return invalid("tags", "has %d entries; the cap is %d", len(tags), p.MaxTags)
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		switch {
		case k == "":
			return invalid("tags", "has an empty key")
		case len(k) > maxTagKeyBytes:
			return invalid("tags", "key %q is %d bytes; the cap is %d", k, len(k), maxTagKeyBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return invalid("tags."+k, "is not valid UTF-8")
		case len(v) > maxTagValueBytes:
			return invalid("tags."+k, "is %d bytes; the cap is %d", len(v), maxTagValueBytes)
		}
	}
	return nil
}

// Normalize fills the defaults of a job that passed [Policy.Validate]: a
// generated ID, the canonical language name, queue "default", isolation
// "reuse", every zero limit from DefaultLimits, max_retry from
// DefaultMaxRetry, and cleaned file paths. As a second line of defence it
// also lowers any limit above its cap to the cap, so a normalized job never
// exceeds the policy even if Validate was skipped.
func (p Policy) Normalize(j *Job) {
	p = p.WithDefaults()
	p.NormalizeEnvelope(j)
	p.FillLimits(j)
}

// NormalizeEnvelope is Normalize without the limits. Producers use it: the
// limits a job leaves zero are filled by the worker, whose operator
// defaults (--defaults) may differ from the producer's built-in ones.
func (p Policy) NormalizeEnvelope(j *Job) {
	p = p.WithDefaults()
	if j.ID == "" {
		j.ID = NewID()
	}
	if name, ok := p.lookupLang(j.Lang); ok {
		j.Lang = name
	}
	j.Queue = cmp.Or(j.Queue, QueueDefault)
	j.Isolation = cmp.Or(j.Isolation, IsolationReuse)
	j.Network = normalizeNetwork(j.Network)
	retry := p.DefaultMaxRetry
	if j.MaxRetry != nil {
		retry = min(max(*j.MaxRetry, 0), p.MaxRetryCap)
	}
	j.MaxRetry = &retry
	for i := range j.Files {
		if j.Files[i].Path != "" {
			j.Files[i].Path = path.Clean(j.Files[i].Path)
		}
	}
	if j.Judge != nil && j.Judge.Checker != nil {
		if name, ok := p.lookupLang(j.Judge.Checker.Lang); ok {
			c := *j.Judge.Checker
			c.Lang = name
			spec := *j.Judge
			spec.Checker = &c
			j.Judge = &spec
		}
	}
}

// FillLimits sets every zero limit of j: from the language's own default
// where it has one ([Language.Limits]: a C++ compiler needs more memory
// than the general default), else from DefaultLimits; and lowers any limit
// above its cap to the cap. The operator's caps bound the language's
// defaults too.
//
// A judged job's timeout_ms is each case's wall-time backstop: left zero,
// it is twice its cpu_ms plus one second.
func (p Policy) FillLimits(j *Job) {
	judgedWall := len(j.Tests) > 0 && !(j.Limits.TimeoutMS > 0)
	p.FillLimitsOf(j.Lang, &j.Limits)
	if judgedWall {
		p = p.WithDefaults()
		j.Limits.TimeoutMS = min(2*j.Limits.CPUMS+1000, p.MaxLimits.TimeoutMS)
	}
}

// FillLimitsOf is FillLimits for the limits l of a job or session in
// language lang.
func (p Policy) FillLimitsOf(lang string, l *Limits) {
	p = p.WithDefaults()
	language, _ := lookup(p.Languages, lang)
	for _, f := range LimitTable {
		v, maxv := f.Get(l), f.Get(&p.MaxLimits)
		if !(v > 0) { // zero, negative or NaN
			v = f.Get(&p.DefaultLimits)
			if d := f.Get(&language.Limits); d > 0 {
				v = d
			}
		}
		f.Set(l, min(v, maxv))
	}
}

// Language returns the language of name, a canonical name or an alias
// (case-insensitively), as the policy offers it.
func (p Policy) Language(name string) (Language, bool) { return lookup(p.Languages, name) }

func (p Policy) lookupLang(name string) (string, bool) {
	l, ok := lookup(p.Languages, name)
	return l.Name, ok
}

// langNames returns every accepted language name, sorted.
func (p Policy) langNames() []string {
	var names []string
	for _, l := range p.Languages {
		names = append(names, l.Name)
		names = append(names, l.Aliases...)
	}
	slices.Sort(names)
	return names
}

// CheckName checks an ID-like string: [A-Za-z0-9_.:-], 1..maxLen bytes,
// not "." or "..". It returns "" if s is valid, else the reason.
func CheckName(s string, maxLen int) string {
	if len(s) > maxLen {
		return fmt.Sprintf("is %d bytes; the cap is %d", len(s), maxLen)
	}
	if s == "." || s == ".." {
		return fmt.Sprintf("%q is reserved", s)
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Sprintf("%q has character %q at byte %d; allowed are A-Z a-z 0-9 _ . : -", s, c, i)
		}
	}
	return ""
}

// ValidID reports whether id is a well-formed job ID.
func ValidID(id string) bool { return id != "" && CheckName(id, maxIDBytes) == "" }

// checkRelPath checks a work-dir-relative path (or, with glob, a glob
// pattern) and returns its cleaned form, or a reason it is refused.
func checkRelPath(p string, glob bool) (string, string) {
	switch {
	case p == "":
		return "", "is empty"
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Sprintf("%q contains a NUL byte", p)
	case !utf8.ValidString(p):
		return "", fmt.Sprintf("%q is not valid UTF-8", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return "", fmt.Sprintf("%q contains a control character", p)
	case len(p) > maxPathBytes:
		return "", fmt.Sprintf("is %d bytes; the cap is %d", len(p), maxPathBytes)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Sprintf("%q is absolute; paths are relative to the work dir", p)
	}
	clean := path.Clean(p)
	switch {
	case clean == ".":
		return "", fmt.Sprintf("%q names the work dir itself", p)
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return "", fmt.Sprintf("%q escapes the work dir", p)
	}
	for c := range strings.SplitSeq(clean, "/") {
		if len(c) > maxPathComponent {
			return "", fmt.Sprintf("%q has a component of %d bytes; the cap is %d", p, len(c), maxPathComponent)
		}
	}
	if glob {
		if _, err := path.Match(p, ""); err != nil {
			return "", fmt.Sprintf("%q is not a valid glob: %v", p, err)
		}
	}
	return clean, ""
}

// checkInputKey checks an input file's key (files[].key): a clean path
// relative to the job's inputs area in the artifact store (see
// [File.Key]), so it can name nothing outside that area.
func checkInputKey(k string) string {
	switch {
	case strings.IndexByte(k, 0) >= 0:
		return fmt.Sprintf("%q contains a NUL byte", k)
	case !utf8.ValidString(k):
		return fmt.Sprintf("%q is not valid UTF-8", k)
	case strings.ContainsFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Sprintf("%q contains a control character", k)
	case strings.HasPrefix(k, "/"):
		return fmt.Sprintf("%q is absolute; keys are relative to the job's inputs area", k)
	}
	for c := range strings.SplitSeq(k, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Sprintf("%q is not a clean relative path (no empty, \".\" or \"..\" components): keys name objects in the job's inputs area only", k)
		}
	}
	return ""
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// formatSize renders a byte count as "N MiB", "N KiB" or "N bytes",
// adding the exact byte count to the larger units.
func formatSize(n int64) string {
	switch {
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n/MiB, n)
	case n >= KiB && n%KiB == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n/KiB, n)
	}
	return fmt.Sprintf("%d bytes", n)
}
