// Package config holds the command-line configuration that sandq's
// commands share, defined once: the flags that reach Redis, and how every
// flag takes its value from a SANDQ_* environment variable. A flag given on
// the command line wins over its variable; the variable wins over the
// flag's default.
//
// It links no container engine and no storage SDK, so producer commands
// stay small; packages with flags of their own (artifacts) annotate them
// with EnvAnnotation and ApplyEnv serves them too.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

// EnvAnnotation is the pflag annotation that names a flag's environment
// variable (see Env and ApplyEnv).
const EnvAnnotation = "sandq_env"

// Env records that flag name takes its value from environment variable
// env when not given on the command line.
func Env(fs *pflag.FlagSet, name, env string) {
	if err := fs.SetAnnotation(name, EnvAnnotation, []string{env}); err != nil {
		panic(fmt.Sprintf("config: %v", err)) // a programming error: no such flag
	}
}

// ApplyEnv sets every flag of fs that carries an EnvAnnotation and was not
// given on the command line from its variable, when that is set and not
// empty. It sets the value without marking the flag changed, so a command
// that repeats "what was typed" repeats only that.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[EnvAnnotation]
		if err != nil || f.Changed || len(names) == 0 {
			return
		}
		v := getenv(names[0])
		if v == "" {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = fmt.Errorf("%s=%q (for --%s): %w", names[0], v, f.Name, serr)
		}
	})
	return err
}

// EnvName returns the environment variable of flag f, or "".
func EnvName(f *pflag.Flag) string {
	if names := f.Annotations[EnvAnnotation]; len(names) > 0 {
		return names[0]
	}
	return ""
}

// Redis is where sandq's queues and results live, and their namespace.
// Every command takes these flags; workers and producers must agree on
// all of them but ResultTTL.
//
// One address is a single Redis; more than one (comma-separated) is a
// Redis Cluster, as is one seed address with Cluster; with MasterName the
// addresses are Redis Sentinels that name the master (failover). All go
// through go-redis's universal client, which asynq takes as it is.
type Redis struct {
	// Addr is host:port, or several comma-separated. Default
	// 127.0.0.1:6379.
	Addr string
	// Cluster: Addr is a seed of a Redis Cluster.
	Cluster bool
	// MasterName is the Sentinel master's name; Addr then lists sentinels.
	MasterName string
	// Username and Password authenticate to Redis (ACL or requirepass);
	// SentinelPassword to the sentinels.
	Username, Password, SentinelPassword string
	// TLS connects with TLS; TLSCA is a PEM file of the CAs to trust
	// (default: the system's); TLSServerName overrides the name checked.
	TLS           bool
	TLSCA         string
	TLSServerName string
	// DB is the database number. Default 0.
	DB int
	// Prefix namespaces sandq's keys and channels. Default "sandq".
	Prefix string
	// QueuePrefix is prepended to the asynq queue names. Default "".
	QueuePrefix string
	// ResultTTL is how long results written by this command are kept.
	// Default 24 h.
	ResultTTL time.Duration
}

// DefaultRedisAddr is the Redis address of a command given none.
const DefaultRedisAddr = "127.0.0.1:6379"

// Register adds the Redis flags to fs, each with its SANDQ_* variable.
// resultTTLHelp says what the TTL applies to in this command.
func (r *Redis) Register(fs *pflag.FlagSet, resultTTLHelp string) {
	fs.StringVar(&r.Addr, "redis", DefaultRedisAddr, "Redis address, host:port; several, comma-separated: a Redis Cluster (or the sentinels, with --redis-master)")
	Env(fs, "redis", "SANDQ_REDIS_ADDR")
	fs.BoolVar(&r.Cluster, "redis-cluster", false, "--redis is a seed of a Redis Cluster (implied by several addresses)")
	Env(fs, "redis-cluster", "SANDQ_REDIS_CLUSTER")
	fs.StringVar(&r.MasterName, "redis-master", "", "Redis Sentinel: the master's name; --redis lists the sentinels")
	Env(fs, "redis-master", "SANDQ_REDIS_MASTER")
	fs.StringVar(&r.Username, "redis-username", "", "Redis ACL user name")
	Env(fs, "redis-username", "SANDQ_REDIS_USERNAME")
	fs.StringVar(&r.Password, "redis-password", "", "Redis password (prefer the variable: a flag shows in ps)")
	Env(fs, "redis-password", "SANDQ_REDIS_PASSWORD")
	fs.StringVar(&r.SentinelPassword, "redis-sentinel-password", "", "the sentinels' password")
	Env(fs, "redis-sentinel-password", "SANDQ_REDIS_SENTINEL_PASSWORD")
	fs.BoolVar(&r.TLS, "redis-tls", false, "connect to Redis with TLS")
	Env(fs, "redis-tls", "SANDQ_REDIS_TLS")
	fs.StringVar(&r.TLSCA, "redis-tls-ca", "", "PEM file of the CAs that sign Redis's certificate (default: the system's; implies --redis-tls)")
	Env(fs, "redis-tls-ca", "SANDQ_REDIS_TLS_CA")
	fs.StringVar(&r.TLSServerName, "redis-tls-server-name", "", "the name Redis's certificate must carry (default: the address's host; implies --redis-tls)")
	Env(fs, "redis-tls-server-name", "SANDQ_REDIS_TLS_SERVER_NAME")
	fs.IntVar(&r.DB, "redis-db", 0, "Redis database number (a single Redis or Sentinel only)")
	Env(fs, "redis-db", "SANDQ_REDIS_DB")
	fs.StringVar(&r.Prefix, "prefix", store.DefaultPrefix, "prefix of sandq's Redis keys and channels")
	Env(fs, "prefix", "SANDQ_PREFIX")
	fs.StringVar(&r.QueuePrefix, "queue-prefix", "", `prefix of the asynq queue names, "" for critical/default/batch`)
	Env(fs, "queue-prefix", "SANDQ_QUEUE_PREFIX")
	fs.DurationVar(&r.ResultTTL, "result-ttl", store.DefaultResultTTL, resultTTLHelp)
	Env(fs, "result-ttl", "SANDQ_RESULT_TTL")
}

// Addrs returns the addresses of Addr.
func (r Redis) Addrs() []string {
	var out []string
	for _, a := range strings.Split(r.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Mode names the topology: "single", "cluster" or "sentinel".
func (r Redis) Mode() string {
	switch {
	case r.MasterName != "":
		return "sentinel"
	case r.Cluster || len(r.Addrs()) > 1:
		return "cluster"
	}
	return "single"
}

// Options returns the go-redis options for r. A TLS CA file that cannot
// be read panics; call Check first.
func (r Redis) Options() *redis.UniversalOptions {
	o := &redis.UniversalOptions{Addrs: r.Addrs(), DB: r.DB, MasterName: r.MasterName, IsClusterMode: r.Mode() == "cluster",
		Username: r.Username, Password: r.Password, SentinelPassword: r.SentinelPassword}
	if r.TLS || r.TLSCA != "" || r.TLSServerName != "" {
		tc, err := r.tlsConfig()
		if err != nil {
			panic(fmt.Sprintf("config: %v (call Check first)", err))
		}
		o.TLSConfig = tc
	}
	return o
}

func (r Redis) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.TLSServerName}
	if r.TLSCA != "" {
		pem, err := os.ReadFile(r.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-tls-ca %s: no PEM certificate in it", r.TLSCA)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// Check reports flags that do not go together, and an unreadable CA file.
func (r Redis) Check() error {
	if len(r.Addrs()) == 0 {
		return errors.New("--redis: no address")
	}
	if r.Mode() == "cluster" && r.DB != 0 {
		return errors.New("--redis-db: a Redis Cluster has database 0 only")
	}
	if r.MasterName != "" && r.Cluster {
		return errors.New("--redis-master and --redis-cluster: Sentinel or Cluster, not both")
	}
	if r.TLS || r.TLSCA != "" || r.TLSServerName != "" {
		if _, err := r.tlsConfig(); err != nil {
			return err
		}
	}
	return nil
}

// KeyPrefix is the prefix of sandq's own keys: Prefix, made a hash tag
// ("{sandq}") on a Cluster unless it has one, so that every key sandq's
// scripts and transactions touch together is in one slot. (asynq's keys
// carry their queue's name as their tag: queues spread over the masters
// by name.)
func (r Redis) KeyPrefix() string {
	if r.Mode() == "cluster" && !strings.Contains(r.Prefix, "{") {
		return "{" + r.Prefix + "}"
	}
	return r.Prefix
}

// Client returns a go-redis client for r; the caller closes it.
func (r Redis) Client() redis.UniversalClient { return redis.NewUniversalClient(r.Options()) }

// ClientConfig returns the client.Client configuration for r, with its own
// Redis client made from r's options.
func (r Redis) ClientConfig() client.Config {
	return client.Config{RedisOptions: r.Options(), Prefix: r.KeyPrefix(), QueuePrefix: r.QueuePrefix, ResultTTL: r.ResultTTL}
}

// StoreConfig returns the store.Store configuration for r. Behind
// Sentinel, a final Result waits for one replica before its task is
// acknowledged (store.Config.SyncReplicas).
func (r Redis) StoreConfig() store.Config {
	c := store.Config{Prefix: r.KeyPrefix(), ResultTTL: r.ResultTTL}
	if r.Mode() == "sentinel" {
		c.SyncReplicas = 1
	}
	return c
}

// DefaultArtifactDir is the local artifact store's default directory,
// ~/.cache/sandq/artifacts: the worker writes there, the API serves from
// there.
func DefaultArtifactDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandq", "artifacts")
	}
	return filepath.Join(os.TempDir(), "sandq-artifacts")
}

// Limits are the operator's limit flags, --caps and --defaults: job limits
// JSON each, such as '{"timeout_ms":60000,"memory_mb":1024}'. Workers and
// the API take them alike; the API checks jobs with the same policy as
// the workers before it enqueues them.
type Limits struct {
	Caps, Defaults string
	// RunAllowHosts are the destinations jobs' network policies may list
	// (jobs.Policy.NetworkAllow): --run-allow-hosts.
	RunAllowHosts []string
	// ImageAllow are the --image-allow patterns: the images a job may
	// name as its environment ("image:REF"; jobs.ImageAllowed). None: no
	// image is allowed.
	ImageAllow []string
}

// Register adds --caps and --defaults to fs, with SANDQ_CAPS and
// SANDQ_DEFAULTS; who says whose they are in the help ("" for a worker's
// own).
func (l *Limits) Register(fs *pflag.FlagSet, who string) {
	capsHelp := `operator caps as job limits JSON, e.g. '{"timeout_ms":60000,"memory_mb":1024}'; unset fields keep the built-in caps`
	defaultsHelp := `limits of a job that sets none, as job limits JSON`
	if who != "" {
		capsHelp = "operator caps as job limits JSON, as " + who + "' --caps"
		defaultsHelp = "limits of a job that sets none, as " + who + "' --defaults"
	}
	fs.StringVar(&l.Caps, "caps", "", capsHelp)
	Env(fs, "caps", "SANDQ_CAPS")
	fs.StringVar(&l.Defaults, "defaults", "", defaultsHelp)
	Env(fs, "defaults", "SANDQ_DEFAULTS")
	RegisterRunAllowHosts(fs, &l.RunAllowHosts, who)
	imageHelp := `images a job may name as its environment ("image:REF"), as globs over the reference with its tag, e.g. 'sandq-test/*,python:3.12' (comma-separated); default none`
	if who != "" {
		imageHelp = "images a job may name as its environment, as " + who + "' --image-allow"
	}
	fs.StringSliceVar(&l.ImageAllow, "image-allow", nil, imageHelp)
	Env(fs, "image-allow", "SANDQ_IMAGE_ALLOW")
}

// RegisterRunAllowHosts adds --run-allow-hosts (SANDQ_RUN_ALLOW_HOSTS)
// to fs: the destinations jobs' network policies may list. Workers, the
// API and the CLI take it alike; a worker's is the one that counts.
func RegisterRunAllowHosts(fs *pflag.FlagSet, dst *[]string, who string) {
	help := `destinations jobs' network policies may list, host:port each (comma-separated): a name, "*.domain" for its subdomains, "*" for every name on that port, or an IP literal; a name listed exactly, or an IP literal, may be a loopback or private address. Empty: no job may ask for network`
	if who != "" {
		help = "destinations jobs' network policies may list, as " + who + "' --run-allow-hosts"
	}
	fs.StringSliceVar(dst, "run-allow-hosts", nil, help)
	Env(fs, "run-allow-hosts", "SANDQ_RUN_ALLOW_HOSTS")
}

// Policy returns the operator policy of the flags: sandq's languages, the
// caps and defaults given (unknown fields refused), checked.
func (l Limits) Policy() (jobs.Policy, error) {
	var p jobs.Policy
	for _, f := range []struct {
		flag, raw string
		dst       *jobs.Limits
	}{{"--caps", l.Caps, &p.MaxLimits}, {"--defaults", l.Defaults, &p.DefaultLimits}} {
		if f.raw == "" {
			continue
		}
		if err := DecodeLimits(f.raw, f.dst); err != nil {
			return p, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if _, err := jobs.ParseAllowList(l.RunAllowHosts); err != nil {
		return p, fmt.Errorf("--run-allow-hosts: %w", err)
	}
	p.NetworkAllow = l.RunAllowHosts
	p = langs.Policy(p)
	p.ImageAllow, p.CheckImages = l.ImageAllow, true
	if err := p.WithDefaults().Check(); err != nil {
		return p, fmt.Errorf("--caps, --defaults, --image-allow: %w", err)
	}
	return p, nil
}

// DecodeLimits decodes job limits JSON strictly (an unknown field is an
// error, not dropped) into dst.
func DecodeLimits(raw string, dst *jobs.Limits) error {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}
