package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Kinds of store errors. Errors of an S3 store wrap one of these (test with errors.Is) when
// the cause is known; the message then says what is wrong and what to change.
var (
	// ErrUnreachable: the endpoint does not answer (connection refused, unknown host name,
	// no route, timeout).
	ErrUnreachable = errors.New("cannot reach the S3 endpoint")
	// ErrTLS: the TLS connection failed (certificate not trusted, or not a TLS server).
	ErrTLS = errors.New("TLS connection to the S3 endpoint failed")
	// ErrCredentials: the server does not accept the credentials (unknown access key ID,
	// wrong secret access key, expired session token).
	ErrCredentials = errors.New("the S3 server refused the credentials")
	// ErrAccessDenied: the credentials are valid but not allowed to do this.
	ErrAccessDenied = errors.New("access denied by the S3 server")
	// ErrNoBucket: the bucket does not exist.
	ErrNoBucket = errors.New("the S3 bucket does not exist")
	// ErrWrongRegion: the bucket is in another region than the one configured.
	ErrWrongRegion = errors.New("the S3 bucket is in another region")
)

// s3Kind is a classified cause: a kind, a short reason and what the user should change.
type s3Kind struct {
	kind   error
	reason string
	hint   string
}

// s3ClassifyErr finds the kind of an error returned by the S3 client; ok is false when the
// cause is not one of the known ones.
func s3ClassifyErr(err error) (k s3Kind, ok bool) {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchBucket":
			return s3Kind{ErrNoBucket, "NoSuchBucket", "create the bucket, or correct the bucket name"}, true
		case "InvalidAccessKeyId", "XAdminUserNotFound": // versitygw answers the latter, with a 404
			return s3Kind{ErrCredentials, apiErr.ErrorCode() + ": the access key ID is not known to the server",
				"check the access key ID"}, true
		case "SignatureDoesNotMatch":
			return s3Kind{ErrCredentials, "SignatureDoesNotMatch: the secret access key does not belong to the access key ID",
				"check the secret access key (no trailing newline or space)"}, true
		case "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
			return s3Kind{ErrCredentials, apiErr.ErrorCode() + ": the session token is expired or invalid",
				"renew the temporary credentials, or use long-lived ones without a session token"}, true
		case "AccessDenied", "AllAccessDisabled", "Forbidden":
			return s3Kind{ErrAccessDenied, apiErr.ErrorCode(),
				"allow these credentials s3:ListBucket on the bucket and s3:GetObject, s3:PutObject, " +
					"s3:DeleteObject and s3:AbortMultipartUpload on the prefix (or check the credentials)"}, true
		case "AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint", "InvalidRegion":
			return s3Kind{ErrWrongRegion, apiErr.ErrorCode(),
				"set the bucket's region, or the endpoint of that region"}, true
		}
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		switch status.HTTPStatusCode() {
		case 301, 307:
			return s3Kind{ErrWrongRegion, "redirected", "set the bucket's region, or the endpoint of that region"}, true
		case 403:
			// A HEAD request has no body, hence no error code.
			return s3Kind{ErrAccessDenied, "403 Forbidden",
				"check the credentials, and allow them s3:ListBucket on the bucket and s3:GetObject, " +
					"s3:PutObject, s3:DeleteObject and s3:AbortMultipartUpload on the prefix"}, true
		}
	}

	var (
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		certErr    x509.CertificateInvalidError
		verifyErr  *tls.CertificateVerificationError
		recordErr  tls.RecordHeaderError
		dnsErr     *net.DNSError
		netErr     net.Error
		caHint     = "give the certificate authority that signs the endpoint's certificate (CA certificate), or use an endpoint with a publicly trusted certificate"
		portsHint  = "check the endpoint's scheme, host and port, and that the S3 server is running and reachable from here"
		timeoutMsg = "timed out"
	)
	switch {
	case errors.As(err, &unknownCA):
		return s3Kind{ErrTLS, "the endpoint's certificate is signed by an unknown authority", caHint}, true
	case errors.As(err, &hostErr):
		return s3Kind{ErrTLS, "the endpoint's certificate is not valid for this host name",
			"use the host name the certificate is issued for in the endpoint"}, true
	case errors.As(err, &certErr), errors.As(err, &verifyErr):
		return s3Kind{ErrTLS, "the endpoint's certificate is not valid", caHint}, true
	case errors.As(err, &recordErr):
		return s3Kind{ErrTLS, "the endpoint does not speak TLS",
			"use http:// for an endpoint without TLS"}, true
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		// net/http's error is not typed.
		return s3Kind{ErrTLS, "the endpoint does not speak TLS",
			"use http:// for an endpoint without TLS"}, true
	case errors.As(err, &dnsErr):
		return s3Kind{ErrUnreachable, "the host name " + dnsErr.Name + " does not resolve",
			"check the endpoint's host name"}, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return s3Kind{ErrUnreachable, "connection refused", portsHint}, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return s3Kind{ErrUnreachable, "no route to host", portsHint}, true
	case errors.Is(err, syscall.ECONNRESET):
		return s3Kind{ErrUnreachable, "connection reset",
			"if the endpoint uses TLS, use https://; else " + portsHint}, true
	case errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		strings.Contains(err.Error(), "Client sent an HTTP request to an HTTPS server"):
		// What a TLS server does to a plain HTTP request depends on timing: a reset, a
		// connection closed while the request body is sent, or a 400 with this text.
		return s3Kind{ErrUnreachable, "connection reset (closed by the server)",
			"if the endpoint uses TLS, use https://; else " + portsHint}, true
	case errors.As(err, &netErr) && netErr.Timeout():
		return s3Kind{ErrUnreachable, timeoutMsg,
			"check the endpoint's host and port, and that no firewall or network policy blocks it"}, true
	}
	return s3Kind{}, false
}

// classify wraps err from the operation op, run on ctx, with the store's location and, when
// the cause is known, its kind, reason and what to change. When ctx is done the caller
// cancelled or ran out of time, and that is what the error says.
func (s *s3Store) classify(ctx context.Context, op string, err error) error {
	where := s.Describe()
	switch ctx.Err() {
	case context.Canceled:
		return fmt.Errorf("%s: %s: cancelled: %w", where, op, err)
	case context.DeadlineExceeded:
		return fmt.Errorf("%s: %s: the deadline passed before the S3 server answered: %w", where, op, err)
	}
	if k, ok := s3ClassifyErr(err); ok {
		return fmt.Errorf("%s: %s: %w (%s): %s: %w", where, op, k.kind, k.reason, k.hint, err)
	}
	return fmt.Errorf("%s: %s: %w", where, op, err)
}

// classifyKey is classify for an operation on one object: a missing object wraps ErrNotFound.
func (s *s3Store) classifyKey(ctx context.Context, op, key string, err error) error {
	if s3IsNotFound(err) {
		return fmt.Errorf("%s: %s %s: %w", s.Describe(), op, key, ErrNotFound)
	}
	return s.classify(ctx, op+" "+key, err)
}

// s3IsNotFound reports a missing object (NoSuchKey, or a 404 without a body from HEAD); a
// missing bucket is not a missing object.
func s3IsNotFound(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		case "NoSuchBucket":
			return false
		}
	}
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && status.HTTPStatusCode() == 404 &&
		(apiErr == nil || apiErr.ErrorCode() == "")
}

// Check makes one cheap request to the store and returns nil when it can be used, or an
// error that says what is wrong: for an S3 store, unreachable endpoint (ErrUnreachable,
// ErrTLS), refused credentials (ErrCredentials, ErrAccessDenied), missing bucket
// (ErrNoBucket) or wrong region (ErrWrongRegion). For an S3 store the request is a listing of
// at most one key under the prefix, tried twice at most.
func Check(ctx context.Context, s Store) error {
	if c, ok := s.(interface{ check(context.Context) error }); ok {
		return c.check(ctx)
	}
	if _, err := s.Stat(ctx, "dolphin-check"); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

func (s *s3Store) check(ctx context.Context) error {
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:  &s.bucket,
		Prefix:  aws.String(s.prefix),
		MaxKeys: aws.Int32(1),
	}, func(o *s3.Options) { o.RetryMaxAttempts = 2 })
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: check: %w (no answer before the deadline): check the endpoint's host and port, and that no firewall or network policy blocks it: %w",
			s.Describe(), ErrUnreachable, err)
	}
	if err != nil {
		return s.classify(ctx, "check", err)
	}
	return nil
}
