package artifacts

import (
	"time"

	"github.com/sandq/sandq/internal/config"
	"github.com/spf13/pflag"
)

// Config says which store to open: S3 when S3.Endpoint is set, else a
// local directory.
type Config struct {
	// S3 configures the S3 store; its Endpoint selects it.
	S3 S3Config
	// Dir is the local store's directory. Default DefaultDir().
	Dir string
}

// Open returns the store cfg names.
func Open(cfg Config) (Store, error) {
	if cfg.S3.Endpoint == "" {
		if cfg.Dir == "" {
			cfg.Dir = DefaultDir()
		}
		return NewLocal(cfg.Dir)
	}
	return NewS3(cfg.S3)
}

// DefaultDir is the local store's default directory: ~/.cache/sandq/artifacts.
func DefaultDir() string { return config.DefaultArtifactDir() }

// envAnnotation is internal/config's EnvAnnotation: flags registered here
// take their values from SANDQ_* variables through config.ApplyEnv.
const envAnnotation = "sandq_env"

// RegisterFlags adds the artifact store's flags to fs, each with its
// SANDQ_* variable, the same in every command that opens a store.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	env := func(name, v string) { _ = fs.SetAnnotation(name, envAnnotation, []string{v}) }
	fs.StringVar(&c.S3.Endpoint, "s3-endpoint", "", "S3-compatible artifact store host:port; empty uses --artifact-dir")
	env("s3-endpoint", "SANDQ_S3_ENDPOINT")
	fs.StringVar(&c.S3.AccessKey, "s3-access-key", "", "S3 access key")
	env("s3-access-key", "SANDQ_S3_ACCESS_KEY")
	fs.StringVar(&c.S3.SecretKey, "s3-secret-key", "", "S3 secret key")
	env("s3-secret-key", "SANDQ_S3_SECRET_KEY")
	fs.StringVar(&c.S3.Bucket, "s3-bucket", "sandq", "S3 bucket, created if missing")
	env("s3-bucket", "SANDQ_S3_BUCKET")
	fs.BoolVar(&c.S3.Secure, "s3-secure", false, "use HTTPS for S3")
	env("s3-secure", "SANDQ_S3_SECURE")
	fs.StringVar(&c.Dir, "artifact-dir", DefaultDir(), "local artifact store when no S3 endpoint is set")
	env("artifact-dir", "SANDQ_ARTIFACT_DIR")
	fs.DurationVar(&c.S3.URLExpiry, "artifact-url-expiry", 24*time.Hour, "lifetime of presigned artifact URLs; at most the artifacts' TTL")
	env("artifact-url-expiry", "SANDQ_ARTIFACT_URL_EXPIRY")
}

// LimitURLExpiry makes presigned URLs expire no later than the artifacts
// they name are deleted: S3.URLExpiry becomes at most ttl (at least a
// second, S3's minimum). A ttl <= 0 (artifacts kept forever) changes
// nothing.
func (c *Config) LimitURLExpiry(ttl time.Duration) {
	if ttl > 0 && (c.S3.URLExpiry <= 0 || c.S3.URLExpiry > ttl) {
		c.S3.URLExpiry = max(ttl, time.Second)
	}
}
