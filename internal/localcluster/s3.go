package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The S3 server of `dolphin local up --s3`: versitygw, built by hack/versitygw.sh, storing
// objects as files under DIR/s3/<bucket>/ (its posix backend), with root credentials generated
// once into DIR/s3-credentials.json.
const (
	// VersitygwVersion is the versitygw release hack/versitygw.sh builds.
	VersitygwVersion = "v1.8.0"
	// EnvVersitygw names the environment variable with the path of the versitygw binary (as
	// `make test` sets it).
	EnvVersitygw = "DOLPHIN_VERSITYGW"
	// S3Process is the name of the S3 server in state.json and of its log file.
	S3Process = "s3"
	// DefaultS3Port is the port the S3 server listens on, on the pods' gateway address.
	DefaultS3Port = 7070
	// S3Bucket is the bucket EnsureS3 creates.
	S3Bucket = "dolphin"
	// s3HealthPath is versitygw's health endpoint (its --health flag).
	s3HealthPath = "/health"
	// s3ReadyTimeout bounds the wait for the S3 server to answer.
	s3ReadyTimeout = 20 * time.Second
)

// DefaultVersitygwPath is where hack/versitygw.sh builds versitygw (`hack/versitygw.sh --print`):
// ${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}/versitygw/<version>/versitygw.
func DefaultVersitygwPath() string {
	return filepath.Join(CacheDir(), "versitygw", VersitygwVersion, "versitygw")
}

// FindVersitygw returns the absolute path of the versitygw binary: explicit when set, else
// $DOLPHIN_VERSITYGW when set, else DefaultVersitygwPath. It fails, saying how to build it,
// when that file is not an executable.
func FindVersitygw(explicit string) (string, error) {
	path, from := DefaultVersitygwPath(), "built by hack/versitygw.sh"
	switch {
	case explicit != "":
		path, from = explicit, "given"
	case os.Getenv(EnvVersitygw) != "":
		path, from = os.Getenv(EnvVersitygw), "from "+EnvVersitygw
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err == nil && (fi.IsDir() || fi.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("versitygw (the S3 server of --s3, %s) is missing at %s (%w): build it with "+
			"hack/versitygw.sh or make versitygw, or name it with --versitygw or %s", from, abs, err, EnvVersitygw)
	}
	return abs, nil
}

// GatewayAddress is the host's address on the pod bridge for podCIDR: its first address, as
// the local node assigns it (10.244.0.1 for 10.244.0.0/24). Pods reach the host there.
func GatewayAddress(podCIDR string) (string, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return "", fmt.Errorf("pod CIDR: %w", err)
	}
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 29 {
		return "", fmt.Errorf("pod CIDR %s: need an IPv4 range of at least /29", podCIDR)
	}
	return prefix.Addr().Next().String(), nil
}

// S3Credentials are the S3 server's root credentials.
type S3Credentials struct {
	AccessKeyID     string `json:"accessKeyID"`
	SecretAccessKey string `json:"secretAccessKey"`
}

// S3CredentialsFile is where the S3 server's credentials are kept in the cluster's folder.
func S3CredentialsFile(dir string) string { return filepath.Join(dir, "s3-credentials.json") }

// S3DataDir is the S3 server's storage in the cluster's folder: DIR/s3/<bucket>/<key>.
func S3DataDir(dir string) string { return filepath.Join(dir, "s3") }

// LoadOrCreateS3Credentials returns the credentials in DIR/s3-credentials.json, generating
// and writing them (mode 0600) the first time, so that they stay the same across `up`s.
func LoadOrCreateS3Credentials(dir string) (S3Credentials, error) {
	path := S3CredentialsFile(dir)
	for range 2 {
		data, err := os.ReadFile(path)
		if err == nil {
			var c S3Credentials
			if err := json.Unmarshal(data, &c); err != nil {
				return S3Credentials{}, fmt.Errorf("parsing %s (delete it to generate new credentials): %w", path, err)
			}
			if c.AccessKeyID == "" || c.SecretAccessKey == "" {
				return S3Credentials{}, fmt.Errorf("%s lacks accessKeyID or secretAccessKey (delete it to generate new credentials)", path)
			}
			return c, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return S3Credentials{}, fmt.Errorf("reading S3 credentials: %w", err)
		}
		c := S3Credentials{AccessKeyID: "dolphin-local-" + randomHex(6), SecretAccessKey: randomHex(20)}
		data, err = json.MarshalIndent(c, "", "  ")
		if err != nil {
			return S3Credentials{}, fmt.Errorf("encoding S3 credentials: %w", err)
		}
		// O_EXCL: of two `up`s at once, one writes and the other reads what it wrote.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return S3Credentials{}, fmt.Errorf("writing S3 credentials: %w", err)
		}
		_, werr := f.Write(append(data, '\n'))
		if err := errors.Join(werr, f.Close()); err != nil {
			return S3Credentials{}, fmt.Errorf("writing %s: %w", path, errors.Join(err, os.Remove(path)))
		}
		return c, nil
	}
	return S3Credentials{}, fmt.Errorf("%s appears and disappears: another command is changing it", path)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b)
}

// S3Options configures EnsureS3.
type S3Options struct {
	// Binary is the versitygw binary (see FindVersitygw).
	Binary string
	// Host is the address to listen on: the pods' gateway address (GatewayAddress), so that
	// pods reach it; it must be an address of this machine.
	Host string
	// Port to listen on (DefaultS3Port when zero).
	Port int
}

// S3Server is the running S3 server of the local cluster.
type S3Server struct {
	// Endpoint is the URL of the S3 API, http://HOST:PORT.
	Endpoint string
	// Bucket exists.
	Bucket string
	// Credentials are the root user's.
	Credentials S3Credentials
	// Dir is the storage folder (DIR/s3).
	Dir string
	// Started is false when a healthy S3 server with the same command line was kept.
	Started bool
}

// EnsureS3 makes sure the S3 server runs as an add-on of the cluster (recorded in state.json,
// logging to DIR/logs/s3.log, stopped by Stop), listening on o.Host:o.Port and storing under
// DIR/s3, then creates the bucket S3Bucket when it is missing. The secret key reaches
// versitygw through its environment, never its command line.
func (cp *ControlPlane) EnsureS3(ctx context.Context, o S3Options) (*S3Server, error) {
	if o.Binary == "" || o.Host == "" {
		return nil, errors.New("the S3 server needs a binary and an address")
	}
	if o.Port == 0 {
		o.Port = DefaultS3Port
	}
	if o.Port < 1 || o.Port > 65535 {
		return nil, fmt.Errorf("S3 port %d is not a TCP port", o.Port)
	}
	data := S3DataDir(cp.Dir)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("creating the S3 folder: %w", err)
	}
	if err := checkXattr(data); err != nil {
		return nil, err
	}
	creds, err := LoadOrCreateS3Credentials(cp.Dir)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	endpoint := "http://" + addr
	started, err := cp.EnsureAddOn(ctx, AddOn{
		Name: S3Process,
		// The access key ID (not secret) is in the command line, so that new credentials
		// restart the server; the secret key is in the environment.
		Args: []string{o.Binary, "--port", addr, "--access", creds.AccessKeyID,
			"--health", s3HealthPath, "--quiet", "posix", data},
		Env:          []string{"ROOT_SECRET_KEY=" + creds.SecretAccessKey},
		Probe:        Probe{URL: endpoint + s3HealthPath},
		ReadyTimeout: s3ReadyTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the S3 server on %s (log in %s): %w", addr, cp.logPath(S3Process), err)
	}
	if err := EnsureBucket(ctx, endpoint, creds, S3Bucket); err != nil {
		return nil, fmt.Errorf("%w (log in %s)", err, cp.logPath(S3Process))
	}
	return &S3Server{Endpoint: endpoint, Bucket: S3Bucket, Credentials: creds, Dir: data, Started: started}, nil
}

// S3Endpoint returns the endpoint of the S3 server recorded in state.json, if any, and
// whether it runs.
func (cp *ControlPlane) S3Endpoint() (endpoint string, running bool) {
	p := cp.Process(S3Process)
	if p == nil {
		return "", false
	}
	return s3EndpointFromArgs(p.Args), p.Alive()
}

// s3EndpointFromArgs reads the listen address out of a versitygw command line.
func s3EndpointFromArgs(args []string) string {
	for i, a := range args {
		if a == "--port" && i+1 < len(args) {
			return "http://" + args[i+1]
		}
	}
	return ""
}

// S3Client returns an S3 client for endpoint with path-style addressing.
func S3Client(endpoint string, c S3Credentials) *s3.Client {
	return s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, ""),
		HTTPClient:                 &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// EnsureBucket creates bucket on the S3 server at endpoint unless it exists, retrying for up
// to 10 s while the server starts answering.
func EnsureBucket(ctx context.Context, endpoint string, c S3Credentials, bucket string) error {
	client := S3Client(endpoint, c)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket})
		if err == nil {
			return nil
		}
		_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket})
		var owned *s3types.BucketAlreadyOwnedByYou
		if err == nil || errors.As(err, &owned) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("creating bucket %s on %s: %w", bucket, endpoint, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ApplySecret creates or updates (server-side apply) an Opaque Secret with data through
// kubeconfig.
func ApplySecret(ctx context.Context, kubeconfig, namespace, name string, data map[string][]byte) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	secret := corev1ac.Secret(name, namespace).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": FieldManager}).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
	if _, err := cs.CoreV1().Secrets(namespace).Apply(ctx, secret,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying Secret %s/%s: %w", namespace, name, err)
	}
	return nil
}
