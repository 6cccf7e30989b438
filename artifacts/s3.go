package artifacts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config configures the S3 store.
type S3Config struct {
	// Endpoint is host:port of the S3 service. Required.
	Endpoint string
	// AccessKey and SecretKey are the credentials.
	AccessKey, SecretKey string
	// Bucket holds the artifacts; it is created if missing. Default "sandq".
	Bucket string
	// Region is passed to the client. Default "us-east-1".
	Region string
	// Secure uses HTTPS. Default false.
	Secure bool
	// URLExpiry is the lifetime of presigned GET URLs. Default 24 h.
	URLExpiry time.Duration
	// MaxRetries bounds minio-go's own retries per request. Default 3;
	// callers add their own backoff around Put (see Retry).
	MaxRetries int
}

// S3 is a Store on an S3-compatible service.
type S3 struct {
	cfg    S3Config
	cli    *minio.Client
	bucket sync.Once
	bErr   error
}

var _ Store = (*S3)(nil)

// NewS3 returns an S3 store. It does not contact the service; the bucket
// is checked (and made) on first use.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("artifacts: S3Config.Endpoint is required")
	}
	cfg.Bucket = cmp.Or(cfg.Bucket, "sandq")
	cfg.Region = cmp.Or(cfg.Region, "us-east-1")
	cfg.URLExpiry = cmp.Or(cfg.URLExpiry, 24*time.Hour)
	cfg.MaxRetries = cmp.Or(cfg.MaxRetries, 3)
	cli, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     cfg.Secure,
		Region:     cfg.Region,
		MaxRetries: cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("artifacts: s3 client: %w", err)
	}
	return &S3{cfg: cfg, cli: cli}, nil
}

// Name implements Store.
func (s *S3) Name() string { return "s3" }

// EnsureBucket creates the bucket if it does not exist. A failure is not
// remembered: the next call tries again.
func (s *S3) EnsureBucket(ctx context.Context) error {
	ok, err := s.cli.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("artifacts: bucket %s: %w", s.cfg.Bucket, err)
	}
	if ok {
		return nil
	}
	err = s.cli.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
	if err != nil {
		if resp := minio.ToErrorResponse(err); resp.Code == "BucketAlreadyOwnedByYou" || resp.Code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("artifacts: make bucket %s: %w", s.cfg.Bucket, err)
	}
	return nil
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	if err := s.EnsureBucket(ctx); err != nil {
		return err
	}
	_, err := s.cli.PutObject(ctx, s.cfg.Bucket, key, r, size, minio.PutObjectOptions{ContentType: contentType})
	if err != nil {
		return fmt.Errorf("artifacts: put %s: %w", key, err)
	}
	return nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := s.cli.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("artifacts: stat %s: %w", key, err)
	}
	obj, err := s.cli.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("artifacts: get %s: %w", key, err)
	}
	return obj, nil
}

// URL implements Store: a presigned GET URL valid for URLExpiry.
func (s *S3) URL(ctx context.Context, key string) (string, error) {
	u, err := s.cli.PresignedGetObject(ctx, s.cfg.Bucket, key, s.cfg.URLExpiry, nil)
	if err != nil {
		return "", fmt.Errorf("artifacts: presign %s: %w", key, err)
	}
	return u.String(), nil
}
