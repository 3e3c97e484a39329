package objectstore

import (
	"context"
	"crypto/md5"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Config says where an S3 store is and how to write to it.
type S3Config struct {
	// Endpoint is the URL of the S3 API, http:// or https://, for example
	// https://s3.eu-west-1.amazonaws.com or http://minio.storage.svc:9000. It must not hold
	// credentials, a query or a fragment. Empty means Amazon S3's own endpoint for Region.
	Endpoint string
	// Bucket is the name of an existing bucket.
	Bucket string
	// Prefix is prepended to every key, for example "prod/db"; it is normalised to end in
	// exactly one '/' ("prod/db" → "prod/db/") and to not start with one. Empty means the
	// whole bucket.
	Prefix string
	// Region of the bucket; default "us-east-1", which most S3-compatible servers accept.
	Region string
	// PathStyle addresses the bucket as <endpoint>/<bucket>/<key> instead of
	// <bucket>.<endpoint>/<key>; most S3-compatible servers need it.
	PathStyle bool
	// AccessKeyID is the access key; empty (together with SecretAccessKey) means anonymous
	// requests.
	AccessKeyID string
	// SecretAccessKey is the secret of AccessKeyID. It is never logged nor put in errors.
	SecretAccessKey string
	// SessionToken is the token of temporary credentials (STS), usually empty.
	SessionToken string
	// DefaultCredentials takes the credentials from the AWS SDK's default chain instead of
	// AccessKeyID: the environment (AWS_ACCESS_KEY_ID…), a web identity token (IAM roles for
	// service accounts, AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), the shared config
	// files, or the instance's role (ECS, EC2 IMDS). Ignored when AccessKeyID is set.
	DefaultCredentials bool
	// CACertPEM holds PEM certificate authorities that sign the endpoint's certificate, for a
	// private CA; they are trusted in addition to the system's. Empty means the system's only.
	CACertPEM []byte
	// PartSize is the size of the first multipart upload parts, from 5 MiB to 1 GiB; default
	// 16 MiB. Parts double after every 1,000 parts up to 1 GiB, so that no object below
	// several TiB needs more than S3's 10,000 parts (see s3PartRule).
	PartSize int64
	// Concurrency is how many parts of one upload are sent at the same time; default 2. An
	// upload holds at most Concurrency+1 part buffers.
	Concurrency int
}

const (
	// DefaultS3PartSize is the part size used when S3Config.PartSize is 0.
	DefaultS3PartSize = 16 << 20
	// MinS3PartSize is S3's smallest part size (every part but the last).
	MinS3PartSize = 5 << 20
	// MaxS3PartSize is the largest S3Config.PartSize, and the size parts stop growing at.
	MaxS3PartSize = 1 << 30
	// DefaultS3Concurrency is the number of parts in flight when S3Config.Concurrency is 0.
	DefaultS3Concurrency = 2
	// DefaultS3Region is the region used when S3Config.Region is empty.
	DefaultS3Region = "us-east-1"

	// s3MaxConcurrency bounds Concurrency: each extra part in flight costs a part buffer.
	s3MaxConcurrency = 16
	// s3DeleteBatch is the most keys DeleteObjects accepts at once.
	s3DeleteBatch = 1000
)

// s3Store is a Store on an S3 bucket.
type s3Store struct {
	client      *s3.Client
	bucket      string
	prefix      string // "" or ends in '/'
	endpoint    string // without credentials, for messages
	parts       s3PartRule
	concurrency int
	// listPageSize is ListObjectsV2's MaxKeys; 0 lets the server choose (1000).
	listPageSize int32
	// https: the endpoint is reached over TLS (Amazon S3's own, or an https:// endpoint); only
	// then may parts carry CRC32C instead of Content-MD5 (s3checksum.go).
	https bool
	// md5Parts is set once the server has shown it does not take CRC32C part checksums
	// (s3checksum.go): multipart uploads then send Content-MD5 without asking again.
	md5Parts atomic.Bool
}

// NewS3 returns a Store on cfg.Bucket under cfg.Prefix. It checks the configuration but does
// not contact the server: call Check for that.
func NewS3(ctx context.Context, cfg S3Config) (Store, error) {
	return newS3(ctx, cfg)
}

func newS3(ctx context.Context, cfg S3Config, optFns ...func(*s3.Options)) (*s3Store, error) {
	endpoint, err := s3CheckEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("s3: no bucket given: set the bucket name")
	}
	if strings.ContainsAny(cfg.Bucket, "/ ") {
		return nil, fmt.Errorf("s3: bucket %q is not a bucket name (no '/' or spaces): put key prefixes in the prefix", cfg.Bucket)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("s3: an access key ID needs its secret access key and the other way round: set both, or neither for anonymous access")
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultS3PartSize
	}
	if partSize < MinS3PartSize || partSize > MaxS3PartSize {
		return nil, fmt.Errorf("s3: part size %d bytes is outside %d (5 MiB) to %d (1 GiB): set a part size in that range, for example 16 MiB", partSize, MinS3PartSize, MaxS3PartSize)
	}
	conc := cfg.Concurrency
	if conc == 0 {
		conc = DefaultS3Concurrency
	}
	if conc < 1 || conc > s3MaxConcurrency {
		return nil, fmt.Errorf("s3: concurrency %d is outside 1 to %d: set a number of parts in flight in that range, default %d", conc, s3MaxConcurrency, DefaultS3Concurrency)
	}
	region := cfg.Region
	if region == "" {
		region = DefaultS3Region
	}

	hc := awshttp.NewBuildableClient().WithDialerOptions(func(d *net.Dialer) {
		d.Timeout = 15 * time.Second
	})
	if len(cfg.CACertPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.CACertPEM) {
			return nil, errors.New("s3: the CA certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the PEM file of the certificate authority that signs the endpoint's certificate")
		}
		hc = hc.WithTransportOptions(func(tr *http.Transport) {
			tr.TLSClientConfig.RootCAs = pool
		})
	}

	opts := s3.Options{
		Region:       region,
		UsePathStyle: cfg.PathStyle,
		HTTPClient:   hc,
		// S3-compatible servers do not all know the flexible checksums (CRC32 by default
		// since 2025); the SDK adds none of its own. Every PUT and part carries a checksum
		// the server checks: Content-MD5, or CRC32C for the parts of a multipart upload over
		// https when the server takes it (s3checksum.go).
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 5
			// The client-side retry quota would make a long backup fail after a burst of
			// retried parts; the attempts per request are bounded already.
			o.RateLimiter = ratelimit.None
		}),
	}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	switch {
	case cfg.AccessKeyID != "":
		opts.Credentials = credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	case cfg.DefaultCredentials:
		// The SDK's own chain, as every AWS tool resolves it; nothing is fetched until the
		// first request, so a missing role is an error of that request, which says so.
		dc, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
		if err != nil {
			return nil, fmt.Errorf("s3: the AWS SDK's default credential chain: %w", err)
		}
		opts.Credentials = aws.NewCredentialsCache(dc.Credentials)
	default:
		opts.Credentials = aws.AnonymousCredentials{}
	}
	shown := endpoint
	if shown == "" {
		shown = "Amazon S3 (" + region + ")"
	}
	return &s3Store{
		client:      s3.New(opts, optFns...),
		bucket:      cfg.Bucket,
		prefix:      normalizePrefix(cfg.Prefix),
		endpoint:    shown,
		parts:       newS3PartRule(partSize),
		concurrency: conc,
		https:       endpoint == "" || strings.HasPrefix(endpoint, "https://"),
	}, nil
}

// s3CheckEndpoint validates an endpoint URL and returns it without a trailing '/'.
func s3CheckEndpoint(e string) (string, error) {
	if e == "" {
		return "", nil
	}
	u, err := url.Parse(e)
	if err != nil {
		// url.Parse quotes the whole input; an endpoint is not secret, but say it plainly.
		return "", fmt.Errorf("s3: endpoint is not a URL: give http://host:port or https://host")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("s3: endpoint %q must start with http:// or https://", u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("s3: endpoint %q has no host: give http://host:port or https://host", u.Redacted())
	}
	if u.User != nil {
		return "", errors.New("s3: the endpoint URL holds a user name or password: remove them and set the access key ID and secret access key instead")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("s3: endpoint %q must not have a query or fragment", u.Redacted())
	}
	return strings.TrimRight(e, "/"), nil
}

// normalizePrefix turns "a/b", "/a/b/" and "a/b//" into "a/b/", and "" or "/" into "".
func normalizePrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// s3CheckKey refuses keys that are not relative object names under the prefix.
func s3CheckKey(key string) error {
	if key == "" {
		return errors.New("empty object key")
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("object key %q must not start or end with '/'", key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("object key %q has an empty, '.' or '..' segment", key)
		}
	}
	if strings.ContainsRune(key, 0) {
		return fmt.Errorf("object key %q holds a NUL byte", key)
	}
	return nil
}

func (s *s3Store) fullKey(key string) string { return s.prefix + key }

// Describe names the location, e.g. "s3://bucket/prefix/ at https://s3.example.com".
func (s *s3Store) Describe() string {
	return "s3://" + s.bucket + "/" + s.prefix + " at " + s.endpoint
}

// locate names one key (see Locate).
func (s *s3Store) locate(key string) string {
	return "s3://" + s.bucket + "/" + s.prefix + key + " at " + s.endpoint
}

// Create starts an upload; it does not contact the server before the first part is full (or
// Commit, for an object smaller than a part).
func (s *s3Store) Create(ctx context.Context, key string) (Upload, error) {
	if err := s3CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Describe(), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, s.classify(ctx, "create "+key, err)
	}
	return newS3Upload(ctx, s, key), nil
}

// Open reads the object key.
func (s *s3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s3CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Describe(), err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.fullKey(key))})
	if err != nil {
		return nil, s.classifyKey(ctx, "open", key, err)
	}
	return out.Body, nil
}

// Stat describes the object key. A HEAD answer has no body, so in a missing bucket Stat
// reports ErrNotFound too (and versitygw answers an unknown access key with a bare 404);
// Check tells these apart.
func (s *s3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := s3CheckKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("%s: %w", s.Describe(), err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.fullKey(key))})
	if err != nil {
		return ObjectInfo{}, s.classifyKey(ctx, "stat", key, err)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

// List returns every object whose key starts with prefix, in key order, following
// ListObjectsV2 continuation tokens.
func (s *s3Store) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.fullKey(prefix))}
	if s.listPageSize > 0 {
		in.MaxKeys = aws.Int32(s.listPageSize)
	}
	var res []ObjectInfo
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, s.classify(ctx, fmt.Sprintf("list %q", prefix), err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			rel, ok := strings.CutPrefix(k, s.prefix)
			if !ok || rel == "" {
				continue // never hand out keys outside the prefix
			}
			res = append(res, ObjectInfo{Key: rel, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Key < res[j].Key })
	return res, nil
}

// Delete removes the objects with DeleteObjects, up to 1000 keys per request.
func (s *s3Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := s3CheckKey(k); err != nil {
			return fmt.Errorf("%s: %w", s.Describe(), err)
		}
	}
	for start := 0; start < len(keys); start += s3DeleteBatch {
		batch := keys[start:min(start+s3DeleteBatch, len(keys))]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.fullKey(k))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}, withContentMD5)
		if err != nil {
			return s.classify(ctx, fmt.Sprintf("delete %d objects", len(batch)), err)
		}
		var failed []types.Error
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "NoSuchKey" {
				failed = append(failed, e)
			}
		}
		if len(failed) > 0 {
			e := failed[0]
			apiErr := &smithy.GenericAPIError{Code: aws.ToString(e.Code), Message: aws.ToString(e.Message)}
			key := strings.TrimPrefix(aws.ToString(e.Key), s.prefix)
			return s.classify(ctx, fmt.Sprintf("delete %s (and %d more keys that failed)", key, len(failed)-1), apiErr)
		}
	}
	return nil
}

// withContentMD5 adds a Content-MD5 header to a request: S3 requires an integrity header on
// DeleteObjects, and the SDK sends only a CRC32 there, which S3-compatible servers that
// predate the flexible checksums refuse.
func withContentMD5(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("DolphinContentMD5",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if ok && req.IsStreamSeekable() && req.Header.Get("Content-MD5") == "" {
					if body := req.GetStream(); body != nil {
						h := md5.New()
						if _, err := io.Copy(h, body); err != nil {
							return middleware.BuildOutput{}, middleware.Metadata{}, err
						}
						if err := req.RewindStream(); err != nil {
							return middleware.BuildOutput{}, middleware.Metadata{}, err
						}
						req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(h.Sum(nil)))
					}
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	})
}

// withUnsignedPayload signs a PutObject or UploadPart that carries a checksum of its body
// (Content-MD5, or CRC32C over https) without hashing the body: X-Amz-Content-Sha256 is
// UNSIGNED-PAYLOAD, as the SDK already does over https. Over http the SDK would otherwise read
// every part once more for a SHA-256 and the server once more to check it. Integrity is
// unchanged: the server checks the body against the checksum (and refuses a mismatch with
// BadDigest), and the checksum header is one of the signed headers, so it cannot be altered in
// transit without breaking the signature. Over plain http that takes a checksum nobody can
// match with another body, so there it is always Content-MD5; over https TLS keeps the body
// as sent, and CRC32C catches what goes wrong on either end. The data object's own SHA-256 is
// in the manifest and checked on restore.
func withUnsignedPayload(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}
