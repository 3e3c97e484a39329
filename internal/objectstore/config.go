package objectstore

import (
	"context"
	"errors"
)

// Config chooses a store: exactly one of S3, Directory and HTTP is set.
type Config struct {
	// S3 is a bucket of Amazon S3 or an S3-compatible server.
	S3 *S3Config
	// Directory is the path of a directory (a mounted volume) to keep objects in.
	Directory string
	// HTTP is a store server: a pod that keeps the objects on a volume it owns.
	HTTP *HTTPConfig
}

// New returns the store cfg describes: NewS3 for S3, NewDirectory for Directory, NewHTTP for
// HTTP.
func New(ctx context.Context, cfg Config) (Store, error) {
	set := 0
	for _, isSet := range []bool{cfg.S3 != nil, cfg.Directory != "", cfg.HTTP != nil} {
		if isSet {
			set++
		}
	}
	switch {
	case set > 1:
		return nil, errors.New("objectstore: more than one store is given (an S3 bucket, a directory, a store server): set only one")
	case cfg.S3 != nil:
		return NewS3(ctx, *cfg.S3)
	case cfg.Directory != "":
		return NewDirectory(cfg.Directory)
	case cfg.HTTP != nil:
		return NewHTTP(*cfg.HTTP)
	default:
		return nil, errors.New("objectstore: no store given: set an S3 bucket, a directory or a store server")
	}
}
