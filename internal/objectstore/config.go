package objectstore

import (
	"context"
	"errors"
)

// Config chooses a store: exactly one of S3 and Directory is set.
type Config struct {
	// S3 is a bucket of Amazon S3 or an S3-compatible server.
	S3 *S3Config
	// Directory is the path of a directory (a mounted volume) to keep objects in.
	Directory string
}

// New returns the store cfg describes: NewS3 for S3, NewDirectory for Directory.
func New(ctx context.Context, cfg Config) (Store, error) {
	switch {
	case cfg.S3 != nil && cfg.Directory != "":
		return nil, errors.New("objectstore: both an S3 bucket and a directory are given: set only one")
	case cfg.S3 != nil:
		return NewS3(ctx, *cfg.S3)
	case cfg.Directory != "":
		return NewDirectory(cfg.Directory)
	default:
		return nil, errors.New("objectstore: no store given: set an S3 bucket or a directory")
	}
}
