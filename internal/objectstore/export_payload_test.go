package objectstore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// NewS3WithHTTPClient is NewS3 with the client's HTTP client replaced by wrap(the client),
// for tests that look at the requests sent.
func NewS3WithHTTPClient(ctx context.Context, cfg S3Config, wrap func(s3.HTTPClient) s3.HTTPClient) (Store, error) {
	return newS3(ctx, cfg, func(o *s3.Options) { o.HTTPClient = wrap(o.HTTPClient) })
}
