package objectstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServerClassifiedErrors: wrong credentials, a missing bucket, an unreachable endpoint
// and TLS mistakes give an error of the right kind that says what to change, from Check
// and from the operations.
func TestServerClassifiedErrors(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	tlsSrv := s3test.StartTLS(t)
	type tc struct {
		name  string
		cfg   func() objectstore.S3Config
		kind  error
		texts []string
	}
	cases := []tc{
		{"WrongSecret", func() objectstore.S3Config {
			c := srv.Config("x")
			c.SecretAccessKey = "wrong"
			return c
		}, objectstore.ErrCredentials, []string{"SignatureDoesNotMatch", "check the secret access key"}},
		{"UnknownAccessKey", func() objectstore.S3Config {
			c := srv.Config("x")
			c.AccessKeyID = "nobody"
			return c
		}, objectstore.ErrCredentials, []string{"the access key ID is not known to the server", "check the access key ID"}},
		{"MissingBucket", func() objectstore.S3Config {
			c := srv.Config("x")
			c.Bucket = "no-such-bucket"
			return c
		}, objectstore.ErrNoBucket, []string{"the S3 bucket does not exist", "create the bucket, or correct the bucket name", "s3://no-such-bucket/x/"}},
		{"ClosedPort", func() objectstore.S3Config {
			c := srv.Config("x")
			c.Endpoint = "http://" + closedPort(t)
			return c
		}, objectstore.ErrUnreachable, []string{"cannot reach the S3 endpoint (connection refused)", "check the endpoint's scheme, host and port"}},
		{"UntrustedCertificate", func() objectstore.S3Config {
			c := tlsSrv.Config("x")
			c.CACertPEM = nil
			return c
		}, objectstore.ErrTLS, []string{"signed by an unknown authority", "certificate authority"}},
		{"HTTPSToPlainServer", func() objectstore.S3Config {
			c := srv.Config("x")
			c.Endpoint = strings.Replace(c.Endpoint, "http://", "https://", 1)
			return c
		}, objectstore.ErrTLS, []string{"does not speak TLS", "use http://"}},
		{"HTTPToTLSServer", func() objectstore.S3Config {
			c := tlsSrv.Config("x")
			c.Endpoint = strings.Replace(c.Endpoint, "https://", "http://", 1)
			return c
		}, objectstore.ErrUnreachable, []string{"connection reset", "if the endpoint uses TLS, use https://"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t, c.cfg(), objectstore.S3TestOptions{MaxAttempts: 2})
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, c.kind) {
					t.Errorf("%s: %v, want %v", op, err, c.kind)
					return
				}
				for _, s := range c.texts {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: %q does not say %q", op, err, s)
					}
				}
				for _, secret := range []string{srv.SecretKey, "wrong"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("%s: the error shows the secret key: %v", op, err)
					}
				}
			}
			err := objectstore.Check(context.Background(), st)
			check("Check", err)
			t.Logf("Check: %v", err)
			u, err := st.Create(context.Background(), "obj")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = u.Write([]byte("small"))
			_, err = u.Commit()
			check("Commit", err)
			u, _ = st.Create(context.Background(), "big")
			_, err = u.Write(make([]byte, 6<<20))
			if err == nil {
				_, err = u.Commit()
			} else {
				_ = u.Abort()
			}
			check("multipart", err)
			_, err = st.Open(context.Background(), "obj")
			check("Open", err)
			_, err = st.List(context.Background(), "")
			check("List", err)
		})
	}

	t.Run("TrustedCertificate", func(t *testing.T) {
		st := newStore(t, tlsSrv.Config("tls"), objectstore.S3TestOptions{})
		if err := objectstore.Check(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 6<<20)
		put(t, st, "obj", data)
		if got := get(t, st, "obj"); !bytes.Equal(got, data) {
			t.Fatal("read back over TLS differs")
		}
	})
}

// TestServerVerifiesContentMD5: versitygw rejects a PUT and a part whose Content-MD5 does not
// match the body, so the MD5 the store sends protects every byte in transit.
func TestServerVerifiesContentMD5(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	c := srv.Client()
	ctx := context.Background()
	wrong := "1B2M2Y8AsgTpgAZPh0AAAA==" // MD5 of something else
	_, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &srv.Bucket, Key: aws.String("md5"), Body: strings.NewReader("data"), ContentMD5: &wrong,
	})
	if err == nil || !strings.Contains(err.Error(), "BadDigest") {
		t.Errorf("PutObject with a wrong Content-MD5: %v, want BadDigest", err)
	}
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &srv.Bucket, Key: aws.String("md5-mp")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: &srv.Bucket, Key: aws.String("md5-mp"), UploadId: mp.UploadId, PartNumber: aws.Int32(1),
		Body: strings.NewReader("data"), ContentMD5: &wrong,
	})
	if err == nil || !strings.Contains(err.Error(), "BadDigest") {
		t.Errorf("UploadPart with a wrong Content-MD5: %v, want BadDigest", err)
	}
	_, _ = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &srv.Bucket, Key: aws.String("md5-mp"), UploadId: mp.UploadId})
}

// TestServerVerifiesPartCRC32C: the S3 server of the tests refuses a part whose
// x-amz-checksum-crc32c does not match its body, in an upload that asked for CRC32C — what
// makes CRC32C a check of the parts as Content-MD5 is (s3checksum.go).
func TestServerVerifiesPartCRC32C(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	c := srv.Client()
	ctx := context.Background()
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: &srv.Bucket, Key: aws.String("crc-mp"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &srv.Bucket, Key: aws.String("crc-mp"), UploadId: mp.UploadId})
	}()
	if mp.ChecksumAlgorithm != types.ChecksumAlgorithmCrc32c {
		t.Fatalf("CreateMultipartUpload answered checksum algorithm %q, want CRC32C", mp.ChecksumAlgorithm)
	}
	wrong := "AAAAAA==" // the CRC32C of nothing
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: &srv.Bucket, Key: aws.String("crc-mp"), UploadId: mp.UploadId, PartNumber: aws.Int32(1),
		Body: strings.NewReader("data"), ChecksumCRC32C: &wrong,
	})
	if err == nil {
		t.Fatal("UploadPart with a wrong x-amz-checksum-crc32c succeeded")
	}
	t.Logf("UploadPart with a wrong CRC32C: %v", err)
}
