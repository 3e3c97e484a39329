// Package operator sets up and runs the Dolphin operator: one controller-runtime manager with
// its own scheme, leader election on a Lease, a metrics endpoint (HTTPS with Kubernetes
// authentication and authorization by default), health probes and the MySQLCluster
// reconciler. NewCommand (the `operator` command of cmd/dolphin and the root of
// cmd/dolphin-operator) only parses flags into Options and calls Run, so tests start the very
// same manager against a real API server.
package operator

import (
	goflag "flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/webhook"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Defaults of the operator flags.
const (
	DefaultMetricsBindAddress      = ":8443"
	DefaultHealthProbeBindAddress  = ":8081"
	DefaultLeaderElectionID        = "dolphin-operator.mysql.dolphin.dev"
	DefaultMaxConcurrentReconciles = 4
	DefaultGracefulShutdownTimeout = 30 * time.Second
)

// Options configures Run. Build it with DefaultOptions or AddFlags; the zero value is not
// usable (it has no leader election ID and no concurrency).
type Options struct {
	// Kubeconfig is the path of a kubeconfig file. Empty means the usual lookup: the
	// KUBECONFIG variable, the in-cluster service account, then ~/.kube/config.
	Kubeconfig string
	// RESTConfig, when set, is used instead of Kubeconfig (tests pass envtest's config).
	RESTConfig *rest.Config
	// Logger, when set, is the logger Run uses instead of a new one from the zap flags: the
	// binary builds one and hands it to klog too, so there is one logger (and one zap
	// sampler, ~0.5 MB of counters) per process.
	Logger logr.Logger

	// MetricsBindAddress is where /metrics is served; "0" turns the endpoint off.
	MetricsBindAddress string
	// MetricsSecure serves metrics over HTTPS, admitting only callers that the API server
	// authenticates (TokenReview) and authorizes (SubjectAccessReview for GET /metrics).
	// False serves plain HTTP to anyone, for local use only.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint. When the files are
	// missing a self-signed certificate is generated at start.
	MetricsCertDir string

	// HealthProbeBindAddress is where /healthz and /readyz are served; "0" turns them off.
	HealthProbeBindAddress string

	// GCPercent is the garbage collector's target (Go's GOGC) the operator process runs with:
	// the heap may grow this many percent over the live data before a collection. Below Go's
	// 100 it keeps the resident memory closer to the live heap for a little CPU
	// (docs/design/0037). 0 or less leaves Go's own setting (the GOGC environment variable, or
	// 100); the default is DefaultGCPercent unless GOGC is set.
	GCPercent int

	// MemoryLimitRatio is the share of the container's memory limit (its cgroup) given to Go
	// as its soft memory limit (GOMEMLIMIT); 0 sets none. GOMEMLIMIT in the environment wins,
	// and AUTOMEMLIMIT (a ratio, or "off").
	MemoryLimitRatio float64

	// PprofBindAddress serves Go's pprof profiles (/debug/pprof/) when set, e.g.
	// "127.0.0.1:6060"; empty (the default) serves nothing.
	PprofBindAddress string

	// LeaderElect makes replicas elect one leader through a coordination.k8s.io Lease
	// before reconciling. Turn it off only when exactly one replica runs (edge mode).
	LeaderElect bool
	// LeaderElectionID is the name of the Lease.
	LeaderElectionID string
	// LeaderElectionNamespace is the namespace of the Lease. Empty means the namespace the
	// operator runs in; it must be set when the operator runs outside a cluster.
	LeaderElectionNamespace string

	// MaxConcurrentReconciles is how many MySQLClusters are reconciled in parallel.
	MaxConcurrentReconciles int
	// GracefulShutdownTimeout bounds how long running reconciles may take to finish after
	// a shutdown signal, before Run returns anyway.
	GracefulShutdownTimeout time.Duration
	// WatchNamespace restricts the operator's cache, and so the clusters it manages, to one
	// namespace. Empty means all namespaces.
	WatchNamespace string
	// InstanceAddress says how the topology engine reaches database instances: "dns" (the
	// pod's name behind the headless Service; in a cluster) or "pod-ip" (where cluster DNS
	// does not resolve, such as the `dolphin local` host).
	InstanceAddress string
	// AgentImage is the image with the dolphin binary that instance pods copy the agent from
	// (resources.BuildOptions).
	AgentImage string
	// WebhookPort is where the admission webhooks are served over HTTPS (9443 in the
	// manifests); 0 serves none. The serving certificate is Dolphin's own (WebhookSecret),
	// issued and renewed by every replica, its CA put into WebhookConfiguration.
	WebhookPort int
	// WebhookHost is the address the webhook server binds to ("" = all).
	WebhookHost string
	// WebhookNamespace holds WebhookSecret; the leader election namespace when empty.
	WebhookNamespace string
	// WebhookSecret is the Secret with the webhook's CA and serving certificate.
	WebhookSecret string
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose caBundle Dolphin keeps.
	WebhookConfiguration string
	// WebhookDNSNames are the names in the serving certificate; dolphin-webhook.<namespace>.svc
	// when empty.
	WebhookDNSNames []string
	// WebhookIPs are IP addresses in the serving certificate (e.g. 127.0.0.1 when the API
	// server calls the webhook on its own host).
	WebhookIPs []string
	// WebhookCertDir, when set, holds tls.crt and tls.key of a serving certificate someone
	// else issues and renews (cert-manager, whose CA injector writes caBundle): the webhooks
	// are served with it, reloaded when the files change, and Dolphin issues no certificate
	// and writes no caBundle.
	WebhookCertDir string

	// SQLResyncInterval is how often a converged MySQLUser or MySQLDatabase is compared with
	// the server again, which is how changes made by hand on the server are repaired.
	SQLResyncInterval time.Duration

	// S3DefaultCredentials lets the operator itself open a backup store that names no
	// credentialsSecret with its own AWS identity (the SDK's default chain: its IRSA role,
	// the node's role) — to delete a backup's data, expire the archive, check a restore. Off
	// by default: a namespace that leaves the Secret out would otherwise act with the
	// operator's identity on any bucket that identity reaches.
	S3DefaultCredentials bool

	// Zap configures the structured logger: JSON at info level by default, console at
	// debug level with --zap-devel.
	Zap zap.Options

	// SkipControllerNameValidation lets one process start Run more than once (tests only:
	// controller-runtime rejects a second controller of the same name otherwise).
	SkipControllerNameValidation bool
}

// DefaultOptions returns the options that an empty command line yields.
func DefaultOptions() Options {
	return Options{
		MetricsBindAddress:      DefaultMetricsBindAddress,
		MetricsSecure:           true,
		HealthProbeBindAddress:  DefaultHealthProbeBindAddress,
		LeaderElect:             true,
		LeaderElectionID:        DefaultLeaderElectionID,
		MaxConcurrentReconciles: DefaultMaxConcurrentReconciles,
		GracefulShutdownTimeout: DefaultGracefulShutdownTimeout,
		InstanceAddress:         "dns",
		AgentImage:              resources.DefaultAgentImage,
		SQLResyncInterval:       controller.DefaultSQLResyncInterval,
		WebhookSecret:           "dolphin-webhook-cert",
		WebhookConfiguration:    "dolphin-validating-webhooks",
		GCPercent:               defaultGCPercent(),
		MemoryLimitRatio:        DefaultMemoryLimitRatio,
	}
}

// DefaultGCPercent is the operator's garbage collection target when GOGC is not set.
const DefaultGCPercent = 50

// defaultGCPercent is DefaultGCPercent, or 0 (Go's own setting) when GOGC is set: an explicit
// GOGC is the user's choice.
func defaultGCPercent() int {
	if _, set := os.LookupEnv("GOGC"); set {
		return 0
	}
	return DefaultGCPercent
}

// AddFlags registers the operator flags on fs, with the defaults of DefaultOptions, and binds
// them to o. The zap logging flags (--zap-devel, --zap-log-level, …) are included.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.StringVar(&o.Kubeconfig, "kubeconfig", d.Kubeconfig,
		"Path to a kubeconfig. Only required out of cluster; KUBECONFIG is honoured too.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", d.MetricsBindAddress,
		"Address the metrics endpoint binds to. \"0\" disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", d.MetricsSecure,
		"Serve metrics over HTTPS with Kubernetes authentication and authorization. "+
			"Use --metrics-secure=false for plain HTTP (local use only).")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", d.MetricsCertDir,
		"Directory with tls.crt and tls.key for the metrics endpoint. A self-signed certificate is used when empty or missing.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", d.HealthProbeBindAddress,
		"Address the /healthz and /readyz probes bind to. \"0\" disables them.")
	fs.IntVar(&o.GCPercent, "gc-percent", d.GCPercent,
		"Garbage collection target (Go's GOGC): how far the heap may grow over live data before a collection. 0: Go's own setting (GOGC, or 100). Default 50 unless GOGC is set.")
	fs.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", d.MemoryLimitRatio,
		"Go's soft memory limit (GOMEMLIMIT) as this share of the container's memory limit: near it the garbage collector works harder instead of the process being killed. 0: none. GOMEMLIMIT in the environment wins, and AUTOMEMLIMIT (a ratio, or off).")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", d.PprofBindAddress,
		"Serve Go's pprof profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060, to see where memory and CPU go. Empty: off.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", d.LeaderElect,
		"Elect a leader through a Lease before reconciling. Use --leader-elect=false only with a single replica (edge mode).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", d.LeaderElectionID,
		"Name of the leader election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", d.LeaderElectionNamespace,
		"Namespace of the leader election Lease. Defaults to the operator's namespace; required out of cluster.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", d.MaxConcurrentReconciles,
		"How many MySQLClusters are reconciled in parallel.")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", d.GracefulShutdownTimeout,
		"How long running reconciles may take to finish after SIGTERM before the operator exits.")
	fs.StringVar(&o.WatchNamespace, "watch-namespace", d.WatchNamespace,
		"Manage MySQLClusters in this namespace only. Empty means all namespaces.")
	fs.StringVar(&o.InstanceAddress, "instance-address", d.InstanceAddress,
		`How the topology engine reaches instances: "dns" (<pod>.<cluster>-instances.<ns>.svc, in a cluster) or "pod-ip" (outside cluster DNS).`)

	fs.StringVar(&o.AgentImage, "agent-image", d.AgentImage,
		"Image with the dolphin binary; instance pods copy the backup and clone agent from it. Use the operator's own image.")

	fs.IntVar(&o.WebhookPort, "webhook-port", d.WebhookPort,
		"Port of the admission webhook server (HTTPS with a certificate Dolphin issues and renews); 0 serves no webhooks.")
	fs.StringVar(&o.WebhookHost, "webhook-host", d.WebhookHost, "Address the webhook server binds to; empty means all.")
	fs.StringVar(&o.WebhookNamespace, "webhook-namespace", d.WebhookNamespace,
		"Namespace of the webhook certificate Secret; defaults to --leader-election-namespace.")
	fs.StringVar(&o.WebhookSecret, "webhook-cert-secret", d.WebhookSecret, "Secret with the webhook's CA and serving certificate.")
	fs.StringVar(&o.WebhookConfiguration, "webhook-configuration", d.WebhookConfiguration,
		"ValidatingWebhookConfiguration whose caBundle Dolphin keeps.")
	fs.StringSliceVar(&o.WebhookDNSNames, "webhook-dns-names", d.WebhookDNSNames,
		"DNS names of the webhook serving certificate; default dolphin-webhook.<namespace>.svc and .svc.cluster.local.")
	fs.StringSliceVar(&o.WebhookIPs, "webhook-ips", d.WebhookIPs, "IP addresses of the webhook serving certificate.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", d.WebhookCertDir,
		"Serve the webhooks with tls.crt and tls.key from this directory, issued and renewed by someone else (cert-manager, whose CA injector writes the caBundle); "+
			"Dolphin then issues no certificate and writes no caBundle. Empty: Dolphin's own certificate (--webhook-cert-secret).")
	fs.DurationVar(&o.SQLResyncInterval, "sql-resync-interval", d.SQLResyncInterval,
		"How often each MySQLUser and MySQLDatabase is compared with the server again (changes made by hand are repaired then).")
	fs.BoolVar(&o.S3DefaultCredentials, "s3-default-credentials", d.S3DefaultCredentials,
		"Let the operator open S3 backup stores that name no credentialsSecret with its own AWS identity (IRSA, node role); "+
			"off: only the database pods use their own identity, and the operator's own store work (data deletion, archive retention, restore checks) asks for a Secret.")

	// Milliseconds in log timestamps (controller-runtime's default is whole seconds): a
	// failover's steps are a fraction of a second apart. --zap-time-encoding still decides.
	if o.Zap.TimeEncoder == nil {
		o.Zap.TimeEncoder = zapcore.TimeEncoderOfLayout(LogTimeLayout)
	}
	zfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	o.Zap.BindFlags(zfs)
	fs.AddGoFlagSet(zfs)
}

// LogTimeLayout is the layout of the operator's log timestamps: RFC 3339 with milliseconds.
const LogTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Validate reports options that Run cannot start with.
func (o *Options) Validate() error {
	switch {
	case !(o.MemoryLimitRatio >= 0 && o.MemoryLimitRatio <= 1):
		return fmt.Errorf("--memory-limit-ratio must be between 0 (no limit) and 1, got %v", o.MemoryLimitRatio)
	case o.MaxConcurrentReconciles < 1:
		return fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles)
	case o.GracefulShutdownTimeout < 0:
		return fmt.Errorf("--graceful-shutdown-timeout must not be negative, got %s", o.GracefulShutdownTimeout)
	case o.LeaderElect && o.LeaderElectionID == "":
		return fmt.Errorf("--leader-election-id must be set when --leader-elect is on")
	case o.WebhookPort < 0 || o.WebhookPort > 65535:
		return fmt.Errorf("--webhook-port must be 0 (off) or a port, got %d", o.WebhookPort)
	case o.WebhookPort > 0 && o.webhookNamespace() == "":
		return fmt.Errorf("--webhook-namespace (or --leader-election-namespace) must be set to serve webhooks: it holds the certificate Secret")
	case o.SQLResyncInterval < time.Second:
		return fmt.Errorf("--sql-resync-interval must be at least 1s, got %s", o.SQLResyncInterval)
	case o.InstanceAddress != "dns" && o.InstanceAddress != "pod-ip":
		return fmt.Errorf(`--instance-address must be "dns" or "pod-ip", got %q`, o.InstanceAddress)
	}
	return nil
}

// webhookNamespace is the namespace of the webhook certificate Secret.
func (o *Options) webhookNamespace() string {
	if o.WebhookNamespace != "" {
		return o.WebhookNamespace
	}
	return o.LeaderElectionNamespace
}

// webhookCerts is the certificate manager the options describe, or nil when no webhooks are
// served or their certificate comes from WebhookCertDir. Its clients are set once the manager
// exists.
func (o *Options) webhookCerts(logger logr.Logger) (*webhook.CertManager, error) {
	if o.WebhookPort == 0 || o.WebhookCertDir != "" {
		return nil, nil
	}
	ns := o.webhookNamespace()
	names := o.WebhookDNSNames
	if len(names) == 0 {
		names = []string{"dolphin-webhook." + ns + ".svc", "dolphin-webhook." + ns + ".svc.cluster.local"}
	}
	var ips []net.IP
	for _, s := range o.WebhookIPs {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("--webhook-ips: %q is not an IP address", s)
		}
		ips = append(ips, ip)
	}
	return &webhook.CertManager{Namespace: ns, SecretName: o.WebhookSecret, DNSNames: names, IPs: ips,
		Configurations: []string{o.WebhookConfiguration}, ConversionCRDs: webhook.CRDs, Log: logger.WithName("webhook-certs")}, nil
}
