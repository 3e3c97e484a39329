package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	dolphinv1alpha1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/clustermanager"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/metricsauth"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/storagemigration"
	"github.com/dolphin-operator/dolphin/internal/webhook"
)

// storageMigrationSettle is the wait between the two rewrites of a storage migration (see
// storagemigration.Migrator.Settle): HA API servers pick up a CRD change within seconds.
const storageMigrationSettle = 15 * time.Second

// EventSource is the reporting controller name on the events the operator records.
const EventSource = "dolphin-operator"

// NewScheme returns a new scheme with the built-in Kubernetes types and Dolphin's API. Every
// manager gets its own; nothing is registered in client-go's global scheme.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering Kubernetes types: %w", err)
	}
	// CustomResourceDefinitions: the webhook CA is injected into their conversion webhook, and
	// the storage migration trims their status.storedVersions.
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering CustomResourceDefinition types: %w", err)
	}
	if err := dolphinv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering %s types: %w", dolphinv1.GroupVersion, err)
	}
	// The deprecated version too: the conversion webhook decodes and encodes it.
	if err := dolphinv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering %s types: %w", dolphinv1alpha1.GroupVersion, err)
	}
	return s, nil
}

// Run starts the operator and blocks until ctx is cancelled (SIGTERM/SIGINT in the binary).
// Then it stops reconciling, waits up to opts.GracefulShutdownTimeout for running reconciles,
// releases the leader Lease and returns nil. It returns an error when the manager cannot be
// set up or fails, including when leadership is lost unexpectedly.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	logger := opts.Logger
	if logger.GetSink() == nil {
		logger = opts.NewLogger()
	}
	ctrl.SetLogger(logger)
	setupLog := logger.WithName("setup")

	cfg, err := restConfig(opts)
	if err != nil {
		return err
	}
	scheme, err := NewScheme()
	if err != nil {
		return err
	}
	certs, err := opts.webhookCerts(logger)
	if err != nil {
		return err
	}
	mo := managerOptions(opts, scheme, logger)
	serveWebhooks := opts.WebhookPort > 0
	switch {
	case certs != nil:
		mo.WebhookServer = webhook.NewServer(crwebhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort}, certs)
	case serveWebhooks:
		mo.WebhookServer = webhook.NewServerFromDir(crwebhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort}, opts.WebhookCertDir)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if certs != nil {
		certs.Client, certs.Reader = mgr.GetClient(), mgr.GetAPIReader()
	}
	if serveWebhooks {
		if err := webhook.Register(mgr, certs, opts.WatchNamespace); err != nil {
			return err
		}
	}

	// Objects stored by an earlier release in an older API version are rewritten in the
	// storage version (v1beta1); status.storedVersions is trimmed when every namespace is ours.
	if err := mgr.Add(&storagemigration.Migrator{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		CRDs: webhook.CRDs, Namespace: opts.WatchNamespace, Settle: storageMigrationSettle, Log: logger.WithName("storage-migration")}); err != nil {
		return fmt.Errorf("adding the storage migration: %w", err)
	}

	agents := &controller.SecretAgentConnector{Client: mgr.GetClient()}
	engines := &clustermanager.Manager{
		Client:    mgr.GetClient(),
		Reader:    mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(EventSource),
		Addresser: addresser(opts, mgr),
		Log:       logger.WithName("topology"),
		// A cluster whose pods do not run costs no probes (issue 11: footprint).
		IdleWithoutPods: true,
		ReleaseStop: func(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) error {
			a, err := agents.Agent(ctx, c, pod)
			if err != nil {
				return err
			}
			return a.ReleaseStop(ctx)
		},
	}
	if err := mgr.Add(engines); err != nil {
		return fmt.Errorf("adding the topology engines: %w", err)
	}
	r := &controller.MySQLClusterReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder(EventSource),
		Topology:  engines,
		Build:     resources.BuildOptions{AgentImage: opts.AgentImage},
		Agents:    agents,
		// The operator's own AWS identity for stores without a Secret only when allowed.
		AllowS3DefaultCredentials: opts.S3DefaultCredentials,
	}
	if err := r.SetupWithManager(mgr, controllerOptions(opts)); err != nil {
		return fmt.Errorf("setting up the MySQLCluster controller: %w", err)
	}
	backups := &controller.MySQLBackupReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder(EventSource),
		Agents:    agents,
		Build:     resources.BuildOptions{AgentImage: opts.AgentImage},

		AllowS3DefaultCredentials: opts.S3DefaultCredentials,
	}
	if err := backups.SetupWithManager(mgr, controllerOptions(opts)); err != nil {
		return fmt.Errorf("setting up the MySQLBackup controller: %w", err)
	}
	users := &controller.MySQLUserReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       mgr.GetEventRecorder(EventSource),
		SQL:            engines,
		ResyncInterval: opts.SQLResyncInterval,
	}
	if err := users.SetupWithManager(mgr, controllerOptions(opts)); err != nil {
		return fmt.Errorf("setting up the MySQLUser controller: %w", err)
	}
	databases := &controller.MySQLDatabaseReconciler{
		Client:         mgr.GetClient(),
		Recorder:       mgr.GetEventRecorder(EventSource),
		SQL:            engines,
		ResyncInterval: opts.SQLResyncInterval,
	}
	if err := databases.SetupWithManager(mgr, controllerOptions(opts)); err != nil {
		return fmt.Errorf("setting up the MySQLDatabase controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}

	// Before the cache starts: it holds only labelled Secrets, so Secrets created by an
	// operator that did not label them would look missing to the reconciler.
	if err := labelOwnSecrets(ctx, mgr.GetAPIReader(), mgr.GetClient(), opts.WatchNamespace, setupLog); err != nil {
		return err
	}

	setupLog.Info("starting operator",
		"leaderElect", opts.LeaderElect,
		"leaderElectionID", opts.LeaderElectionID,
		"watchNamespace", opts.WatchNamespace,
		"maxConcurrentReconciles", opts.MaxConcurrentReconciles,
		"metricsBindAddress", opts.MetricsBindAddress,
		"metricsSecure", opts.MetricsSecure)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	setupLog.Info("operator stopped")
	return nil
}

// NewLogger returns the structured logger that the zap options describe: JSON at info level
// by default, console at debug level with --zap-devel. The binary builds one, hands it to klog
// (client-go's logger) before Run — which Run cannot do safely, because klog.SetLogger races
// with anything already logging — and to Run as Options.Logger.
func (o *Options) NewLogger() logr.Logger {
	return zap.New(zap.UseFlagOptions(&o.Zap))
}

// restConfig returns opts.RESTConfig, the config of opts.Kubeconfig, or the default lookup.
func restConfig(opts Options) (*rest.Config, error) {
	if opts.RESTConfig != nil {
		return opts.RESTConfig, nil
	}
	if opts.Kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading Kubernetes client config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", opts.Kubeconfig, err)
	}
	if cfg.QPS == 0 {
		cfg.QPS = -1 // like ctrl.GetConfig: rely on API priority and fairness, not client-side limits
	}
	return cfg, nil
}

// managerOptions translates Options into the controller-runtime manager's options.
func managerOptions(opts Options, scheme *runtime.Scheme, logger logr.Logger) ctrl.Options {
	shutdown := opts.GracefulShutdownTimeout
	mo := ctrl.Options{
		Scheme: scheme,
		Logger: quietShutdown(logger),
		Metrics: metricsserver.Options{
			BindAddress:   opts.MetricsBindAddress,
			SecureServing: opts.MetricsSecure,
			CertDir:       opts.MetricsCertDir,
			// HTTP/2 stays off: its rapid-reset and stream-flood weaknesses
			// (CVE-2023-44487, CVE-2023-39325) are not worth it for a scrape endpoint.
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		},
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		PprofBindAddress:              opts.PprofBindAddress,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true, // Run returns right after the manager stops
		GracefulShutdownTimeout:       &shutdown,
	}
	if opts.MetricsSecure {
		// TokenReview + SubjectAccessReview, as controller-runtime's metrics/filters does,
		// without linking k8s.io/apiserver (docs/design/0037).
		mo.Metrics.FilterProvider = metricsauth.WithAuthenticationAndAuthorization
	}
	// The cache holds only Dolphin's own objects of the kinds it watches; see
	// controller.CacheByObject. It keeps Dolphin's own managedFields entries and drops the
	// others' (controller.KeepOwnManagedFields): the reconciler skips an apply that changes
	// nothing by extracting Dolphin's fields from them (controller.applyChild); with
	// cache.TransformStripManagedFields that comparison always differs and every reconcile
	// re-applies every child (docs/design/0037).
	mo.Cache = cache.Options{ByObject: controller.CacheByObject()}
	if opts.WatchNamespace != "" {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{opts.WatchNamespace: {}}
	}
	if opts.SkipControllerNameValidation {
		skip := true
		mo.Controller.SkipNameValidation = &skip
	}
	return mo
}

// controllerOptions are the options the MySQLCluster controller is set up with.
func controllerOptions(opts Options) crcontroller.Options {
	return crcontroller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
}

// addresser chooses how the topology engine reaches instances.
func addresser(opts Options, mgr ctrl.Manager) clustermanager.Addresser {
	if opts.InstanceAddress == "pod-ip" {
		return clustermanager.PodIPAddresser{Client: mgr.GetClient()}
	}
	return clustermanager.DNSAddresser{Client: mgr.GetClient()}
}
