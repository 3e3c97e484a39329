package objectstore

import (
	"context"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3TestOptions tune an S3 store for the tests of package objectstore_test.
type S3TestOptions struct {
	// ListPageSize is ListObjectsV2's MaxKeys (0: the server's default).
	ListPageSize int32
	// PartsPerStep and MaxParts replace the part-size rule's 1,000 and 10,000 (0: keep).
	PartsPerStep, MaxParts int
	// MaxAttempts replaces the client's attempts per request (0: keep).
	MaxAttempts int
	// Requests, when set, counts the requests in flight.
	Requests *RequestCounter
}

// NewS3ForTest is NewS3 with test options.
func NewS3ForTest(ctx context.Context, cfg S3Config, o S3TestOptions) (Store, error) {
	var fns []func(*s3.Options)
	if o.MaxAttempts > 0 {
		fns = append(fns, func(so *s3.Options) { so.RetryMaxAttempts = o.MaxAttempts })
	}
	if o.Requests != nil {
		fns = append(fns, func(so *s3.Options) { o.Requests.next = so.HTTPClient; so.HTTPClient = o.Requests })
	}
	s, err := newS3(ctx, cfg, fns...)
	if err != nil {
		return nil, err
	}
	s.listPageSize = o.ListPageSize
	if o.PartsPerStep > 0 {
		s.parts.perStep = o.PartsPerStep
	}
	if o.MaxParts > 0 {
		s.parts.maxParts = o.MaxParts
	}
	return s, nil
}

// RequestCounter is an HTTP client that records, per request kind, the most requests in
// flight at once and the bodies' sizes.
type RequestCounter struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	// AfterCreate, when set, runs once the server has answered a CreateMultipartUpload; if the
	// request's context is cancelled by then, the client gets the cancellation instead of the
	// answer (as when a cancel lands while the response is on the wire).
	AfterCreate func()

	mu       sync.Mutex
	maxParts int32
	parts    int32
	sizes    []int64  // UploadPart bodies, in send order
	puts     int      // PutObject
	deletes  []string // DeleteObjects: the Content-MD5 header of each
}

// Do implements s3.HTTPClient.
func (c *RequestCounter) Do(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	isPart := r.Method == http.MethodPut && q.Has("partNumber")
	if isPart {
		c.mu.Lock()
		c.parts++
		c.maxParts = max(c.maxParts, c.parts)
		c.sizes = append(c.sizes, r.ContentLength)
		c.mu.Unlock()
		defer func() { c.mu.Lock(); c.parts--; c.mu.Unlock() }()
	} else if r.Method == http.MethodPost && q.Has("delete") {
		c.mu.Lock()
		c.deletes = append(c.deletes, r.Header.Get("Content-MD5"))
		c.mu.Unlock()
	} else if r.Method == http.MethodPut && !q.Has("uploadId") && r.Header.Get("X-Amz-Copy-Source") == "" {
		c.mu.Lock()
		c.puts++
		c.mu.Unlock()
	}
	if r.Method == http.MethodPost && q.Has("uploads") && c.AfterCreate != nil {
		resp, err := c.next.Do(r)
		c.AfterCreate()
		if err == nil && r.Context().Err() != nil {
			resp.Body.Close()
			return nil, r.Context().Err()
		}
		return resp, err
	}
	return c.next.Do(r)
}

// MaxPartsInFlight is the most UploadPart requests that were in flight at once.
func (c *RequestCounter) MaxPartsInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.maxParts)
}

// PartSizes are the UploadPart bodies' sizes, in send order (retries included).
func (c *RequestCounter) PartSizes() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.sizes...)
}

// PutObjects is how many PutObject requests were sent.
func (c *RequestCounter) PutObjects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts
}

// DeleteRequests are the Content-MD5 headers of the DeleteObjects requests sent.
func (c *RequestCounter) DeleteRequests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.deletes...)
}
