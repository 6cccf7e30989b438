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
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/sandq/sandq/jobs"
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
type Redis struct {
	// Addr is host:port. Default 127.0.0.1:6379.
	Addr string
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
	fs.StringVar(&r.Addr, "redis", DefaultRedisAddr, "Redis address, host:port")
	Env(fs, "redis", "SANDQ_REDIS_ADDR")
	fs.IntVar(&r.DB, "redis-db", 0, "Redis database number")
	Env(fs, "redis-db", "SANDQ_REDIS_DB")
	fs.StringVar(&r.Prefix, "prefix", jobs.DefaultPrefix, "prefix of sandq's Redis keys and channels")
	Env(fs, "prefix", "SANDQ_PREFIX")
	fs.StringVar(&r.QueuePrefix, "queue-prefix", "", `prefix of the asynq queue names, "" for critical/default/batch`)
	Env(fs, "queue-prefix", "SANDQ_QUEUE_PREFIX")
	fs.DurationVar(&r.ResultTTL, "result-ttl", jobs.DefaultResultTTL, resultTTLHelp)
	Env(fs, "result-ttl", "SANDQ_RESULT_TTL")
}

// Options returns the go-redis options for r.
func (r Redis) Options() *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: []string{r.Addr}, DB: r.DB}
}

// Client returns a go-redis client for r; the caller closes it.
func (r Redis) Client() redis.UniversalClient { return redis.NewUniversalClient(r.Options()) }

// ClientConfig returns the jobs.Client configuration for r, with its own
// Redis client made from r's options.
func (r Redis) ClientConfig() jobs.Config {
	return jobs.Config{RedisOptions: r.Options(), Prefix: r.Prefix, QueuePrefix: r.QueuePrefix, ResultTTL: r.ResultTTL}
}

// StoreConfig returns the jobs.Store configuration for r.
func (r Redis) StoreConfig() jobs.StoreConfig {
	return jobs.StoreConfig{Prefix: r.Prefix, ResultTTL: r.ResultTTL}
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
