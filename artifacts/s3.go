package artifacts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
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
	cfg S3Config
	cli *minio.Client
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

// Put implements Store. An empty contentType is guessed from the key;
// what Attachment names is stored with "Content-Disposition: attachment",
// so a browser downloads it instead of running it as a page of the
// store's origin.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	if err := s.EnsureBucket(ctx); err != nil {
		return err
	}
	opts := minio.PutObjectOptions{ContentType: cmp.Or(contentType, ContentType(key))}
	if Attachment(key, opts.ContentType) {
		opts.ContentDisposition = disposition(key)
	}
	_, err := s.cli.PutObject(ctx, s.cfg.Bucket, key, r, size, opts)
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

// URL implements Store: a presigned GET URL valid for URLExpiry. For what
// Attachment names, the URL also asks for "Content-Disposition:
// attachment" (response-content-disposition), whatever the object was
// stored with.
func (s *S3) URL(ctx context.Context, key string) (string, error) {
	var params url.Values
	if Attachment(key, "") {
		params = url.Values{"response-content-disposition": {disposition(key)}}
	}
	u, err := s.cli.PresignedGetObject(ctx, s.cfg.Bucket, key, s.cfg.URLExpiry, params)
	if err != nil {
		return "", fmt.Errorf("artifacts: presign %s: %w", key, err)
	}
	return u.String(), nil
}

// disposition is the Content-Disposition of a download of key:
// attachment, with the key's base name as the file name.
func disposition(key string) string {
	if d := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(key)}); d != "" {
		return d
	}
	return "attachment"
}

// List implements Store.
func (s *S3) List(ctx context.Context, dir string, fn func(Object) error) error {
	ctx, cancel := context.WithCancel(ctx) // stops minio-go's lister when fn fails
	defer cancel()
	for o := range s.cli.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: dirPrefix(dir), Recursive: true}) {
		if o.Err != nil {
			if s3Code(o.Err) == "NoSuchBucket" {
				return nil
			}
			return fmt.Errorf("artifacts: list %s: %w", dirPrefix(dir), o.Err)
		}
		if err := fn(Object{Key: o.Key, Size: o.Size, ModTime: o.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Delete implements Store, in batches (S3 DeleteObjects, up to 1000 keys
// a request).
func (s *S3) Delete(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	ch := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		ch <- minio.ObjectInfo{Key: k}
	}
	close(ch)
	var errs []error
	for e := range s.cli.RemoveObjects(ctx, s.cfg.Bucket, ch, minio.RemoveObjectsOptions{}) {
		if code := s3Code(e.Err); code == "NoSuchKey" || code == "NoSuchBucket" {
			continue
		}
		if len(errs) < 3 {
			errs = append(errs, fmt.Errorf("%s: %w", e.ObjectName, e.Err))
		} else if len(errs) == 3 {
			errs = append(errs, errors.New("more errors left out"))
		}
	}
	if len(errs) == 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("artifacts: delete: %w", err)
		}
		return nil
	}
	return fmt.Errorf("artifacts: delete: %w", errors.Join(errs...))
}

// LifecycleRuleID is the ID of the bucket lifecycle rule SetExpiration
// writes for dir.
func LifecycleRuleID(dir string) string {
	id := "sandq-expire:" + dirPrefix(dir)
	if len(id) > 255 { // S3's limit
		id = id[:255]
	}
	return id
}

// LifecycleDays is the expiration of a bucket lifecycle rule for ttl: S3
// counts in whole days, so ttl rounded up.
func LifecycleDays(ttl time.Duration) int {
	const day = 24 * time.Hour
	return int((ttl + day - 1) / day)
}

// SetExpiration makes the bucket expire the objects under dir ttl after
// they were stored, rounded up to whole days (S3 lifecycle granularity),
// with one lifecycle rule (ID LifecycleRuleID(dir), filtered on "dir/",
// status Enabled) added to the bucket's other rules or replacing an older
// version of itself. It is a backstop for the Sweeper, which works to the
// second: a ttl under a day sets nothing. The bucket is made if missing.
// The error is the caller's to log: a service that refuses lifecycle rules
// leaves the store working.
func (s *S3) SetExpiration(ctx context.Context, dir string, ttl time.Duration) error {
	if ttl < 24*time.Hour {
		return nil
	}
	if err := s.EnsureBucket(ctx); err != nil {
		return err
	}
	rule := lifecycle.Rule{
		ID:         LifecycleRuleID(dir),
		Status:     "Enabled",
		RuleFilter: lifecycle.Filter{Prefix: dirPrefix(dir)},
		Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(LifecycleDays(ttl))},
	}
	cfg, err := s.cli.GetBucketLifecycle(ctx, s.cfg.Bucket)
	if err != nil {
		if s3Code(err) != "NoSuchLifecycleConfiguration" {
			return fmt.Errorf("artifacts: lifecycle of bucket %s: %w", s.cfg.Bucket, err)
		}
		cfg = lifecycle.NewConfiguration()
	}
	found := false
	for i, r := range cfg.Rules {
		if r.ID != rule.ID {
			continue
		}
		if r.Status == rule.Status && r.RuleFilter.Prefix == rule.RuleFilter.Prefix && r.Prefix == "" &&
			r.Expiration.Days == rule.Expiration.Days && r.Expiration.IsDateNull() {
			return nil // already there: the usual case at a worker's start
		}
		cfg.Rules[i], found = rule, true
	}
	if !found {
		cfg.Rules = append(cfg.Rules, rule)
	}
	if err := s.cli.SetBucketLifecycle(ctx, s.cfg.Bucket, cfg); err != nil {
		return fmt.Errorf("artifacts: set lifecycle of bucket %s: %w", s.cfg.Bucket, err)
	}
	return nil
}

// s3Code is the S3 error code in err ("NoSuchKey"), or "" when the
// service did not answer with an error response.
func s3Code(err error) string {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.Code
	}
	return ""
}
