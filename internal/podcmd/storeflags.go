package podcmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// storeFlags are the flags that name a backup store, an S3 bucket (--s3-*) or a directory
// (--directory), with the same names, meanings and checks as those of `dolphin restore`. The
// S3 credentials come from the environment (envS3AccessKeyID, envS3SecretAccessKey), never
// from flags; without them, from the AWS SDK's default chain.
type storeFlags struct {
	directory string

	// A Dolphin store server (a pvc store): its URL, the name its certificate carries, and
	// files with its CA and bearer token.
	storeURL, storeServerName, storeCAFile, storeTokenFile string

	s3Endpoint, s3Bucket, s3Prefix, s3Region, s3PartSize, s3CAFile string
	s3PathStyle                                                    bool
}

// register adds the store flags to cmd.
func (f *storeFlags) register(cmd *cobra.Command) { f.registerOn(cmd.Flags()) }

// registerOn adds the store flags to fs.
func (f *storeFlags) registerOn(fs *pflag.FlagSet) {
	fs.StringVar(&f.directory, "directory", "", "a directory store (a mounted volume) holding the backup, instead of S3")
	fs.StringVar(&f.s3Endpoint, "s3-endpoint", "", "URL of the S3 API (default: Amazon S3 for the region)")
	fs.StringVar(&f.s3Bucket, "s3-bucket", "", "the S3 bucket holding the backup")
	fs.StringVar(&f.s3Prefix, "s3-prefix", "", "key prefix of the store in the bucket")
	fs.StringVar(&f.s3Region, "s3-region", "", "region of the bucket (default "+objectstore.DefaultS3Region+")")
	fs.BoolVar(&f.s3PathStyle, "s3-path-style", false, "address the bucket as <endpoint>/<bucket> (most S3-compatible servers)")
	fs.StringVar(&f.s3PartSize, "s3-part-size", "", "multipart part size of the store, e.g. 16Mi (default 16Mi)")
	fs.StringVar(&f.s3CAFile, "s3-ca-file", "", "PEM file of certificate authorities for the endpoint (a private CA)")
	fs.StringVar(&f.storeURL, "store-url", "", "URL of a Dolphin store server (a PVC backup store), instead of S3")
	fs.StringVar(&f.storeServerName, "store-server-name", "", "name the store server's certificate carries (default: the URL's host)")
	fs.StringVar(&f.storeCAFile, "store-ca-file", "", "PEM file of the store server's certificate authority")
	fs.StringVar(&f.storeTokenFile, "store-token-file", "", "file holding the store server's bearer token")
}

// config maps the flags, and the credentials from getenv, to the store's configuration.
// readFile reads the CA file.
func (f *storeFlags) config(getenv func(string) string, readFile func(string) ([]byte, error)) (objectstore.Config, error) {
	s3Set := f.s3Endpoint != "" || f.s3Prefix != "" || f.s3Region != "" || f.s3PathStyle || f.s3PartSize != "" || f.s3CAFile != ""
	httpSet := f.storeURL != "" || f.storeServerName != "" || f.storeCAFile != "" || f.storeTokenFile != ""
	switch {
	case httpSet && (f.directory != "" || f.s3Bucket != "" || s3Set):
		return objectstore.Config{}, errors.New("--store-* flags name a store server: do not combine them with --directory or --s3-*")
	case httpSet:
		return f.httpConfig(readFile)
	case f.directory != "" && (f.s3Bucket != "" || s3Set):
		return objectstore.Config{}, errors.New("--directory and the --s3-* flags are exclusive: give one store")
	case f.directory != "":
		return objectstore.Config{Directory: f.directory}, nil
	case f.s3Bucket == "" && s3Set:
		return objectstore.Config{}, errors.New("--s3-bucket is required with the other --s3-* flags")
	case f.s3Bucket == "":
		return objectstore.Config{}, errors.New("no store given: set --s3-bucket (and --s3-endpoint, ...), --store-url or --directory")
	}
	s3 := &objectstore.S3Config{
		Endpoint: f.s3Endpoint, Bucket: f.s3Bucket, Prefix: f.s3Prefix, Region: f.s3Region,
		PathStyle:   f.s3PathStyle,
		AccessKeyID: getenv(envS3AccessKeyID), SecretAccessKey: getenv(envS3SecretAccessKey),
		// Without them, the AWS SDK's default chain (IAM roles for service accounts, the
		// node's role, AWS_* variables), as the AWS tools do.
		DefaultCredentials: getenv(envS3AccessKeyID) == "",
	}
	if f.s3PartSize != "" {
		q, err := resource.ParseQuantity(f.s3PartSize)
		if err != nil {
			return objectstore.Config{}, fmt.Errorf("--s3-part-size %q: %w (want a size such as 16Mi)", f.s3PartSize, err)
		}
		s3.PartSize = q.Value()
	}
	if f.s3CAFile != "" {
		pem, err := readFile(f.s3CAFile)
		if err != nil {
			return objectstore.Config{}, fmt.Errorf("--s3-ca-file: %w", err)
		}
		if len(pem) == 0 {
			return objectstore.Config{}, fmt.Errorf("--s3-ca-file %s is empty", f.s3CAFile)
		}
		s3.CACertPEM = pem
	}
	return objectstore.Config{S3: s3}, nil
}

// httpConfig is the configuration of a store server named by the --store-* flags.
func (f *storeFlags) httpConfig(readFile func(string) ([]byte, error)) (objectstore.Config, error) {
	if f.storeURL == "" || f.storeTokenFile == "" {
		return objectstore.Config{}, errors.New("--store-url and --store-token-file are both required for a store server")
	}
	token, err := readFile(f.storeTokenFile)
	if err != nil {
		return objectstore.Config{}, fmt.Errorf("--store-token-file: %w", err)
	}
	cfg := &objectstore.HTTPConfig{URL: f.storeURL, ServerName: f.storeServerName, Token: strings.TrimSpace(string(token))}
	if cfg.Token == "" {
		return objectstore.Config{}, fmt.Errorf("--store-token-file %s is empty", f.storeTokenFile)
	}
	if f.storeCAFile != "" {
		if cfg.CACertPEM, err = readFile(f.storeCAFile); err != nil {
			return objectstore.Config{}, fmt.Errorf("--store-ca-file: %w", err)
		}
	}
	return objectstore.Config{HTTP: cfg}, nil
}
