package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/passwords"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/schedule"
)

// Paths the validators are served at (the ValidatingWebhookConfiguration names them).
const (
	MySQLUserPath    = "/validate-mysql-dolphin-dev-v1beta1-mysqluser"
	MySQLClusterPath = "/validate-mysql-dolphin-dev-v1beta1-mysqlcluster"
	SecretPath       = "/validate--v1-secret"
)

// passwordKeys are the keys of a user-supplied Secret whose passwords a resource uses, with
// the user name each protects ("" when it is not one account's).
type passwordKeys map[string]string

// userKeys are the password keys a MySQLUser reads from its own Secret (none when Dolphin
// generates it).
func userKeys(u *dolphinv1.MySQLUser) (string, passwordKeys) {
	if u.Spec.PasswordSecretKeyRef == nil {
		return "", nil
	}
	return u.Spec.PasswordSecretKeyRef.Name, passwordKeys{resources.UserPasswordKey(u): resources.UserName(u)}
}

// clusterKeys are the password keys a MySQLCluster reads from a user-supplied credentials
// Secret.
func clusterKeys(c *dolphinv1.MySQLCluster) (string, passwordKeys) {
	if c.Spec.Credentials.SecretName == "" {
		return "", nil
	}
	return c.Spec.Credentials.SecretName, passwordKeys{
		resources.OperatorPasswordKey: resources.OperatorUser, resources.ReplicationPasswordKey: resources.ReplicationUser,
		resources.MonitorPasswordKey: resources.MonitorUser, resources.RootPasswordKey: "root"}
}

// checkSecret checks the passwords at keys of Secret data; field names where the Secret is
// referenced, for the message. A missing key is not an error here (the controller reports
// it); a weak password is.
func checkSecret(field, secret string, data map[string][]byte, keys passwordKeys) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		pw, ok := data[k]
		if !ok || len(pw) == 0 {
			continue
		}
		if err := passwords.Check(string(pw), keys[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s: key %q of Secret %q: %w", field, k, secret, err))
		}
	}
	return errors.Join(errs...)
}

// secretChecker reads a referenced Secret live (a user's Secret is outside the operator's
// cache until Dolphin labels it) and checks its passwords.
type secretChecker struct{ reader client.Reader }

func (c secretChecker) check(ctx context.Context, ns, field, name string, keys passwordKeys) (admission.Warnings, error) {
	if name == "" || len(keys) == 0 {
		return nil, nil
	}
	var s corev1.Secret
	err := c.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return admission.Warnings{fmt.Sprintf("Secret %q named in %s does not exist yet: its password is checked when it is created or changed", name, field)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %q named in %s: %w", name, field, err)
	}
	return nil, checkSecret(field, name, s.Data, keys)
}

// UserValidator rejects a MySQLUser whose own password Secret holds a weak password.
type UserValidator struct{ secrets secretChecker }

// ValidateCreate implements admission.Validator.
func (v UserValidator) ValidateCreate(ctx context.Context, u *dolphinv1.MySQLUser) (admission.Warnings, error) {
	name, keys := userKeys(u)
	return v.secrets.check(ctx, u.Namespace, "spec.passwordSecretKeyRef", name, keys)
}

// ValidateUpdate implements admission.Validator: only a change of the reference is checked (a
// Secret's own changes are checked by the Secret webhook).
func (v UserValidator) ValidateUpdate(ctx context.Context, old, u *dolphinv1.MySQLUser) (admission.Warnings, error) {
	oldName, oldKeys := userKeys(old)
	name, keys := userKeys(u)
	if oldName == name && maps.Equal(oldKeys, keys) {
		return nil, nil
	}
	return v.ValidateCreate(ctx, u)
}

// ValidateDelete implements admission.Validator.
func (UserValidator) ValidateDelete(context.Context, *dolphinv1.MySQLUser) (admission.Warnings, error) {
	return nil, nil
}

// ClusterValidator rejects a MySQLCluster whose user-supplied credentials Secret holds a weak
// password, whose own TLS certificate would not serve it, whose backup or verification
// schedule does not parse (a cron expression of the right shape with a value out of range, an
// unknown time zone: what CEL cannot tell), or whose retention window would keep more than
// schedule.MaxKeptBackups of its scheduled backups.
type ClusterValidator struct{ secrets secretChecker }

// ValidateCreate implements admission.Validator.
func (v ClusterValidator) ValidateCreate(ctx context.Context, c *dolphinv1.MySQLCluster) (admission.Warnings, error) {
	name, keys := clusterKeys(c)
	warnings, err := v.secrets.check(ctx, c.Namespace, "spec.credentials.secretName", name, keys)
	w, terr := v.certificate(ctx, c)
	sw, serr := storeWarnings(ctx, v.secrets.reader, c)
	errs := append([]error{err, terr, serr, schedule.CheckRetention(c.Spec.Backup, time.Now()), configKeysError(c)}, schedule.Check(c.Spec.Backup)...)
	return append(append(append(append(append(warnings, w...), sw...), retentionWarnings(c.Spec.Backup)...), durabilityWarnings(c)...), versionWarnings(c)...), errors.Join(errs...)
}

// durabilityWarnings warns that spec.durability Preferred chooses nothing for a single
// instance: with no replica, every write exists on one server only, whatever is chosen.
func durabilityWarnings(c *dolphinv1.MySQLCluster) admission.Warnings {
	if c.Spec.Durability == dolphinv1.DurabilityPreferred && c.Spec.Instances == 1 {
		return admission.Warnings{"spec.durability Preferred has no effect with one instance: with no replica, every write exists on one server only; it applies once spec.instances is 2 or more"}
	}
	return nil
}

// configKeysError refuses spec.mysqlConfig keys Dolphin does not know for the cluster's
// engine (the table the reconciler uses, internal/sysvars) and values of the wrong form for
// their setting: either would otherwise be admitted and stop the reconcile
// (UnknownConfigKeys, InvalidConfigValues).
func configKeysError(c *dolphinv1.MySQLCluster) error {
	d := resources.Defaulted(c)
	unknown := resources.UnknownConfigKeys(d)
	if len(unknown) == 0 {
		if refused, misread := resources.InvalidConfigValues(d); len(refused)+len(misread) > 0 {
			return fmt.Errorf("spec.mysqlConfig: %s", strings.Join(append(refused, misread...), "; "))
		}
		return nil
	}
	return fmt.Errorf("spec.mysqlConfig: %s not known for %s %s: check the spelling (underscores, e.g. innodb_buffer_pool_size), "+
		"or write it with the loose_ prefix (loose_%s) to pass it unchecked", strings.Join(unknown, ", "), d.Spec.Engine.Flavor, d.Spec.Engine.Version, unknown[0])
}

// restartWarnings warns that an update changes spec.mysqlConfig settings the server takes
// only at a restart: Dolphin then restarts the instances one at a time, the primary last
// after a switchover.
func restartWarnings(old, c *dolphinv1.MySQLCluster) admission.Warnings {
	var changed []string
	for _, k := range resources.RestartConfigKeys(resources.Defaulted(c)) {
		if ov, ok := old.Spec.MySQLConfig[k]; !ok || ov != c.Spec.MySQLConfig[k] {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return admission.Warnings{fmt.Sprintf("spec.mysqlConfig: %s take effect only at a restart: Dolphin restarts the instances one at a time (replicas first, then a switchover)",
		strings.Join(changed, ", "))}
}

// versionWarnings warns about an engine version that names a release series only
// (10.11, not 10.11.19) with the official image: that tag moves, so pods created on different
// days can run different patch releases. status.topology.instances[].version says what runs.
func versionWarnings(c *dolphinv1.MySQLCluster) admission.Warnings {
	e := c.Spec.Engine
	if e.Image != "" || e.Version == "" || strings.Count(e.Version, ".") >= 2 {
		return nil
	}
	return admission.Warnings{fmt.Sprintf("spec.engine.version %q is a release series: its image tag moves with every patch release, so pods "+
		"created on different days may run different ones; set the full version (for example %s.19) to pin it "+
		"(status.topology.instances[].version says what each instance runs)", e.Version, e.Version)}
}

// retentionWarnings warns about a schedule without retention: every backup is then kept.
func retentionWarnings(b *dolphinv1.BackupSpec) admission.Warnings {
	if b != nil && b.Schedule != nil && b.Retention == nil {
		return admission.Warnings{"spec.backup.schedule is set without spec.backup.retention: every scheduled backup is kept until deleted by hand"}
	}
	return nil
}

// ValidateUpdate implements admission.Validator: the credentials Secret's name is immutable;
// a certificate Secret named now (or another one) is checked, and a MySQLBackupStore newly
// named is looked up.
func (v ClusterValidator) ValidateUpdate(ctx context.Context, old, c *dolphinv1.MySQLCluster) (admission.Warnings, error) {
	var errs []error
	// Only what changed is checked, so that an object admitted before a check existed can
	// still be updated otherwise (the reconciler reports it).
	if !equality.Semantic.DeepEqual(backupSchedules(old.Spec.Backup), backupSchedules(c.Spec.Backup)) {
		errs = schedule.Check(c.Spec.Backup)
	}
	if !equality.Semantic.DeepEqual(backupSchedules(old.Spec.Backup), backupSchedules(c.Spec.Backup)) ||
		!equality.Semantic.DeepEqual(retentionOf(old.Spec.Backup), retentionOf(c.Spec.Backup)) {
		errs = append(errs, schedule.CheckRetention(c.Spec.Backup, time.Now()))
	}
	var warnings admission.Warnings
	if !slices.Equal(storeUses(old), storeUses(c)) {
		w, err := storeWarnings(ctx, v.secrets.reader, c)
		warnings, errs = w, append(errs, err)
	}
	if old.Spec.Durability != c.Spec.Durability || old.Spec.Instances != c.Spec.Instances {
		warnings = append(warnings, durabilityWarnings(c)...)
	}
	if !maps.Equal(old.Spec.MySQLConfig, c.Spec.MySQLConfig) || old.Spec.Engine != c.Spec.Engine {
		errs = append(errs, configKeysError(c))
		warnings = append(warnings, restartWarnings(old, c)...)
		if old.Spec.Engine != c.Spec.Engine {
			warnings = append(warnings, versionWarnings(c)...)
		}
	}
	if equality.Semantic.DeepEqual(old.Spec.TLS, c.Spec.TLS) {
		return warnings, errors.Join(errs...)
	}
	w, err := v.certificate(ctx, c)
	return append(warnings, w...), errors.Join(append(errs, err)...)
}

// retentionOf is a spec.backup's retention (nil when none).
func retentionOf(b *dolphinv1.BackupSpec) *dolphinv1.BackupRetention {
	if b == nil {
		return nil
	}
	return b.Retention
}

// backupSchedules are the schedules of a spec.backup (nil when none), to tell whether an
// update changed them.
func backupSchedules(b *dolphinv1.BackupSpec) []*dolphinv1.BackupSchedule {
	if b == nil {
		return nil
	}
	out := []*dolphinv1.BackupSchedule{b.Schedule, nil}
	if b.Verification != nil {
		out[1] = &b.Verification.Schedule
	}
	return out
}

// certificate checks the Secret named in spec.tls.certificateSecret, if any.
func (v ClusterValidator) certificate(ctx context.Context, c *dolphinv1.MySQLCluster) (admission.Warnings, error) {
	name := c.Spec.TLS.CertificateSecret
	if !c.Spec.TLS.Enabled || name == "" {
		return nil, nil
	}
	var s corev1.Secret
	err := v.secrets.reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return admission.Warnings{fmt.Sprintf("Secret %q named in spec.tls.certificateSecret does not exist yet: it is checked when it is created or changed", name)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %q named in spec.tls.certificateSecret: %w", name, err)
	}
	return nil, certificateError("spec.tls.certificateSecret", c, &s)
}

// certificateError rejects a certificate Secret that would not serve cluster c.
func certificateError(field string, c *dolphinv1.MySQLCluster, s *corev1.Secret) error {
	if problem := resources.CheckServerCertificate(c, s.Data, time.Now()); problem != "" {
		return fmt.Errorf("%s: the certificate in Secret %q %s: use one for %s", field, s.Name, problem,
			strings.Join(resources.ServerCertificateNames(c), ", "))
	}
	return nil
}

// ValidateDelete implements admission.Validator.
func (ClusterValidator) ValidateDelete(context.Context, *dolphinv1.MySQLCluster) (admission.Warnings, error) {
	return nil, nil
}

// SecretValidator rejects a change that puts a weak password into a Secret a MySQLUser or a
// MySQLCluster reads its passwords from. It sees only Secrets labelled
// mysql.dolphin.dev/credentials=true (the webhook's object selector): the ones Dolphin reads.
type SecretValidator struct {
	// Client lists MySQLUsers and MySQLClusters (from the cache).
	Client client.Reader
	// Namespace, when set, is the only namespace this operator manages (--watch-namespace):
	// Secrets elsewhere are not its business (and not in its cache).
	Namespace string
}

// ValidateCreate implements admission.Validator.
func (v SecretValidator) ValidateCreate(ctx context.Context, s *corev1.Secret) (admission.Warnings, error) {
	return nil, v.check(ctx, s, nil)
}

// ValidateUpdate implements admission.Validator: only keys whose value changes are checked,
// so a label Dolphin adds, or rotating one password, is not refused for another key an
// earlier version accepted.
func (v SecretValidator) ValidateUpdate(ctx context.Context, old, s *corev1.Secret) (admission.Warnings, error) {
	changed := map[string]bool{}
	for k, val := range s.Data {
		if o, ok := old.Data[k]; !ok || string(o) != string(val) {
			changed[k] = true
		}
	}
	if len(changed) == 0 {
		return nil, nil
	}
	return nil, v.check(ctx, s, changed)
}

// ValidateDelete implements admission.Validator.
func (SecretValidator) ValidateDelete(context.Context, *corev1.Secret) (admission.Warnings, error) {
	return nil, nil
}

// check checks the keys of s that MySQLUsers and MySQLClusters read (only those in `only`,
// when not nil).
func (v SecretValidator) check(ctx context.Context, s *corev1.Secret, only map[string]bool) error {
	if v.Namespace != "" && s.Namespace != v.Namespace {
		return nil
	}
	pick := func(keys passwordKeys) passwordKeys {
		if only == nil {
			return keys
		}
		out := passwordKeys{}
		for k, u := range keys {
			if only[k] {
				out[k] = u
			}
		}
		return out
	}
	var users dolphinv1.MySQLUserList
	if err := v.Client.List(ctx, &users, client.InNamespace(s.Namespace)); err != nil {
		return fmt.Errorf("listing MySQLUsers: %w", err)
	}
	var errs []error
	for i := range users.Items {
		u := &users.Items[i]
		if name, keys := userKeys(u); name == s.Name {
			errs = append(errs, checkSecret("MySQLUser "+u.Name+" spec.passwordSecretKeyRef", s.Name, s.Data, pick(keys)))
		}
	}
	var clusters dolphinv1.MySQLClusterList
	if err := v.Client.List(ctx, &clusters, client.InNamespace(s.Namespace)); err != nil {
		return fmt.Errorf("listing MySQLClusters: %w", err)
	}
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if name, keys := clusterKeys(c); name == s.Name {
			errs = append(errs, checkSecret("MySQLCluster "+c.Name+" spec.credentials.secretName", s.Name, s.Data, pick(keys)))
		}
		if c.Spec.TLS.Enabled && c.Spec.TLS.CertificateSecret == s.Name {
			errs = append(errs, certificateError("MySQLCluster "+c.Name+" spec.tls.certificateSecret", c, s))
		}
	}
	return errors.Join(errs...)
}
