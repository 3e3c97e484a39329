package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	tib = int64(1) << 40
)

func TestS3PartRule(t *testing.T) {
	r := newS3PartRule(DefaultS3PartSize)
	for _, tc := range []struct {
		part int
		size int64
	}{
		{1, 16 * mib}, {1000, 16 * mib}, {1001, 32 * mib}, {2000, 32 * mib}, {2001, 64 * mib},
		{5001, 512 * mib}, {6000, 512 * mib}, {6001, gib}, {10000, gib},
	} {
		if got := r.size(tc.part); got != tc.size {
			t.Errorf("part %d: %d MiB, want %d MiB", tc.part, got/mib, tc.size/mib)
		}
	}
	for _, base := range []int64{MinS3PartSize, DefaultS3PartSize, 100 * mib, MaxS3PartSize} {
		r := newS3PartRule(base)
		prev := int64(0)
		for n := 1; n <= s3MaxParts; n++ {
			size := r.size(n)
			if size < MinS3PartSize || size > MaxS3PartSize || size < prev {
				t.Fatalf("base %d MiB, part %d: %d bytes (previous %d)", base/mib, n, size, prev)
			}
			prev = size
		}
		if got := r.maxObject(); got < 3*tib {
			t.Errorf("base %d MiB: max object %d GiB, want several TiB", base/mib, got/gib)
		}
	}
}

// The figures in the part-size rule's comment.
func TestS3PartRuleDocumentedFigures(t *testing.T) {
	for _, tc := range []struct {
		base int64
		tib  string
	}{{5 * mib, "3.17"}, {16 * mib, "4.87"}, {gib, "9.77"}} {
		if got := fmt.Sprintf("%.2f", float64(newS3PartRule(tc.base).maxObject())/float64(tib)); got != tc.tib {
			t.Errorf("base %d MiB: max object %s TiB, the comment says %s", tc.base/mib, got, tc.tib)
		}
	}
	// Object sizes up to which the default's parts stay at a size.
	r := newS3PartRule(DefaultS3PartSize)
	var total int64
	var got []string
	for n := 1; n <= s3MaxParts; n += s3PartsPerStep {
		if r.size(n) == MaxS3PartSize {
			break
		}
		total += s3PartsPerStep * r.size(n)
		got = append(got, fmt.Sprintf("%d MiB ≤ %.3g GiB", r.size(n)/mib, float64(total)/float64(gib)))
	}
	want := "[16 MiB ≤ 15.6 GiB 32 MiB ≤ 46.9 GiB 64 MiB ≤ 109 GiB 128 MiB ≤ 234 GiB 256 MiB ≤ 484 GiB 512 MiB ≤ 984 GiB]"
	if fmt.Sprint(got) != want {
		t.Errorf("steps %v, the comment says %s", got, want)
	}
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "/": "", "a": "a/", "a/b": "a/b/", "a/b/": "a/b/", "/a/b//": "a/b/",
	} {
		if got := normalizePrefix(in); got != want {
			t.Errorf("normalizePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestS3CheckKey(t *testing.T) {
	for _, ok := range []string{"a", "a/b.zst", "ns/cluster/2026-01-01T00:00:00Z/manifest.json", ".hidden"} {
		if err := s3CheckKey(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/a", "a/", "a//b", "../a", "a/./b", "a/..", "a\x00b"} {
		if err := s3CheckKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNewS3Config(t *testing.T) {
	ok := S3Config{Endpoint: "http://minio:9000/", Bucket: "b", Prefix: "p", AccessKeyID: "AK", SecretAccessKey: "SECRET"}
	st, err := newS3(context.Background(), ok)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Describe(), "s3://b/p/ at http://minio:9000"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if st.parts.base != DefaultS3PartSize || st.concurrency != DefaultS3Concurrency || st.client.Options().Region != DefaultS3Region {
		t.Errorf("defaults: part %d, concurrency %d, region %q", st.parts.base, st.concurrency, st.client.Options().Region)
	}
	aws, err := newS3(context.Background(), S3Config{Bucket: "b", Region: "eu-west-1"})
	if err != nil || aws.Describe() != "s3://b/ at Amazon S3 (eu-west-1)" {
		t.Errorf("no endpoint: %v, %v", aws, err)
	}

	for _, tc := range []struct {
		name string
		mod  func(*S3Config)
		want string
	}{
		{"NoBucket", func(c *S3Config) { c.Bucket = "" }, "set the bucket name"},
		{"BucketWithSlash", func(c *S3Config) { c.Bucket = "b/p" }, "put key prefixes in the prefix"},
		{"NoScheme", func(c *S3Config) { c.Endpoint = "minio:9000" }, "must start with http:// or https://"},
		{"NoHost", func(c *S3Config) { c.Endpoint = "http://" }, "has no host"},
		{"UserInfo", func(c *S3Config) { c.Endpoint = "https://AK:SECRET@minio" }, "set the access key ID and secret access key instead"},
		{"Query", func(c *S3Config) { c.Endpoint = "https://minio?x=1" }, "must not have a query"},
		{"SecretWithoutKey", func(c *S3Config) { c.AccessKeyID = "" }, "set both, or neither"},
		{"SmallParts", func(c *S3Config) { c.PartSize = 5*mib - 1 }, "outside 5242880 (5 MiB) to 1073741824 (1 GiB)"},
		{"HugeParts", func(c *S3Config) { c.PartSize = gib + 1 }, "set a part size in that range"},
		{"Concurrency", func(c *S3Config) { c.Concurrency = 17 }, "concurrency 17 is outside 1 to 16"},
		{"NegativeConcurrency", func(c *S3Config) { c.Concurrency = -1 }, "outside 1 to 16"},
		{"CAGarbage", func(c *S3Config) { c.CACertPEM = []byte("not a certificate") }, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mod(&cfg)
			_, err := NewS3(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// apiErr is what the SDK returns for an error response.
func apiErr(status int, code string) error {
	resp := &smithyhttp.Response{Response: &http.Response{StatusCode: status}}
	var inner error = &smithy.GenericAPIError{Code: code, Message: "m"}
	if code == "" {
		inner = errors.New("no body")
	}
	return &smithy.OperationError{ServiceID: "S3", OperationName: "ListObjectsV2",
		Err: &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: resp, Err: inner}}}
}

func netErr(err error) error {
	return &smithy.OperationError{ServiceID: "S3", OperationName: "GetObject",
		Err: &smithyhttp.RequestSendError{Err: fmt.Errorf("Get \"http://x\": %w", err)}}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestS3Classify(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	for _, tc := range []struct {
		name string
		err  error
		kind error
		says string
	}{
		{"NoSuchBucket", apiErr(404, "NoSuchBucket"), ErrNoBucket, "create the bucket"},
		{"InvalidAccessKeyId", apiErr(403, "InvalidAccessKeyId"), ErrCredentials, "check the access key ID"},
		{"SignatureDoesNotMatch", apiErr(403, "SignatureDoesNotMatch"), ErrCredentials, "check the secret access key"},
		{"ExpiredToken", apiErr(400, "ExpiredToken"), ErrCredentials, "renew the temporary credentials"},
		{"AccessDenied", apiErr(403, "AccessDenied"), ErrAccessDenied, "s3:PutObject"},
		{"HeadForbidden", apiErr(403, ""), ErrAccessDenied, "check the credentials"},
		{"WrongRegion", apiErr(400, "AuthorizationHeaderMalformed"), ErrWrongRegion, "set the bucket's region"},
		{"Redirect", apiErr(301, ""), ErrWrongRegion, "set the bucket's region"},
		{"ConnectionRefused", netErr(dial(syscall.ECONNREFUSED)), ErrUnreachable, "connection refused"},
		{"NoRoute", netErr(dial(syscall.EHOSTUNREACH)), ErrUnreachable, "no route to host"},
		{"DNS", netErr(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "minio.invalid", IsNotFound: true}}),
			ErrUnreachable, "the host name minio.invalid does not resolve"},
		{"Timeout", netErr(&net.OpError{Op: "dial", Err: timeoutErr{}}), ErrUnreachable, "timed out"},
		{"UnknownCA", netErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), ErrTLS, "unknown authority"},
		{"WrongHost", netErr(x509.HostnameError{Host: "x", Certificate: &x509.Certificate{}}), ErrTLS, "not valid for this host name"},
		{"NotTLS", netErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), ErrTLS, "use http://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &s3Store{bucket: "b", prefix: "p/", endpoint: "https://s3.example"}
			err := s.classify(context.Background(), "list", tc.err)
			if !errors.Is(err, tc.kind) || !errors.Is(err, tc.err) {
				t.Fatalf("%v: not %v and the cause", err, tc.kind)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.says) || !strings.HasPrefix(msg, "s3://b/p/ at https://s3.example: list: ") {
				t.Errorf("%q does not say %q", msg, tc.says)
			}
		})
	}

	s := &s3Store{bucket: "b", endpoint: "e"}
	other := apiErr(500, "InternalError")
	if err := s.classify(context.Background(), "list", other); !errors.Is(err, other) ||
		errors.Is(err, ErrUnreachable) || errors.Is(err, ErrCredentials) {
		t.Errorf("unknown cause: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.classify(ctx, "list", netErr(context.Canceled)); errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("cancelled by the caller: %v", err)
	}

	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apiErr(404, "NoSuchKey"), true}, {apiErr(404, "NotFound"), true}, {apiErr(404, ""), true},
		{apiErr(404, "NoSuchBucket"), false}, {apiErr(403, "AccessDenied"), false},
	} {
		if got := s3IsNotFound(tc.err); got != tc.want {
			t.Errorf("s3IsNotFound(%v) = %v", tc.err, got)
		}
	}
	if err := s.classifyKey(context.Background(), "stat", "k", apiErr(404, "NotFound")); !errors.Is(err, ErrNotFound) {
		t.Errorf("classifyKey: %v", err)
	}
}

func TestNewDispatch(t *testing.T) {
	ctx := context.Background()
	if _, err := New(ctx, Config{}); err == nil {
		t.Error("New with nothing set succeeded")
	}
	if _, err := New(ctx, Config{S3: &S3Config{Bucket: "b"}, Directory: t.TempDir()}); err == nil {
		t.Error("New with both set succeeded")
	}
	st, err := New(ctx, Config{S3: &S3Config{Endpoint: "http://127.0.0.1:9", Bucket: "b"}})
	if err != nil || !strings.HasPrefix(st.Describe(), "s3://b/") {
		t.Errorf("S3: %v, %v", st, err)
	}
	st, err = New(ctx, Config{Directory: t.TempDir()})
	if err != nil || !strings.HasPrefix(st.Describe(), "file://") {
		t.Errorf("Directory: %v, %v", st, err)
	}
}
