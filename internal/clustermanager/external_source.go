package clustermanager

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/migrate"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// externalSource is the server outside the cluster that c follows (spec.bootstrap.external
// with replicate), with the account of its Secret and, for TLS, the CA as the servers see it
// (mounted by the StatefulSet); nil when c follows none.
func (m *Manager) externalSource(ctx context.Context, c *dolphinv1.MySQLCluster) (*topology.ExternalSource, error) {
	if !resources.FollowsExternalSource(c) || resources.CutOver(c) {
		return nil, nil
	}
	ext := c.Spec.Bootstrap.External
	x := &topology.ExternalSource{Host: ext.Host, Port: int(ext.Port), Cutover: c.Annotations[dolphinv1.CutoverAnnotation],
		Verify: c.Annotations[dolphinv1.VerifyExternalAnnotation], FallBack: c.Annotations[dolphinv1.FallBackAnnotation]}
	if x.Port == 0 {
		x.Port = 3306
	}
	// unavailable keeps the engine running without the account: failover and fencing do not
	// need it, and an engine that does not start would do neither.
	unavailable := func(why string) (*topology.ExternalSource, error) {
		x.Unavailable = why
		sum := sha256.Sum256([]byte(why))
		x.ID = "unavailable-" + hex.EncodeToString(sum[:8])
		return x, nil
	}
	read := func(name string) (*corev1.Secret, error) {
		var s corev1.Secret
		key := types.NamespacedName{Namespace: c.Namespace, Name: name}
		err := m.Client.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			// The cache holds only Dolphin's labelled Secrets: the user's is read directly.
			err = m.APIReader().Get(ctx, key, &s)
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s of spec.bootstrap.external: %w", key, err)
		}
		return &s, nil
	}
	acct, err := read(ext.AccountSecretName)
	if apierrors.IsNotFound(err) {
		return unavailable(fmt.Sprintf("the Secret %s of spec.bootstrap.external does not exist: create it again with the keys %s and %s",
			ext.AccountSecretName, resources.ExternalUsernameKey, resources.ExternalPasswordKey))
	}
	if err != nil {
		return nil, err
	}
	user, password := string(acct.Data[resources.ExternalUsernameKey]), string(acct.Data[resources.ExternalPasswordKey])
	if user == "" || password == "" {
		return unavailable(fmt.Sprintf("the Secret %s lacks %q or %q: spec.bootstrap.external needs both", ext.AccountSecretName,
			resources.ExternalUsernameKey, resources.ExternalPasswordKey))
	}
	x.User, x.Password = user, password
	ep := migrate.Endpoint{Host: x.Host, Port: x.Port, User: user, Password: password}
	id := sha256.New()
	fmt.Fprintf(id, "%s\x00%d\x00%s\x00%s\x00", x.Host, x.Port, user, password)
	if ext.CASecretName != "" {
		ca, err := read(ext.CASecretName)
		if apierrors.IsNotFound(err) {
			return unavailable(fmt.Sprintf("the Secret %s of spec.bootstrap.external (the server's CA) does not exist: create it again with the key %s",
				ext.CASecretName, resources.ExternalCAKey))
		}
		if err != nil {
			return nil, err
		}
		// The host's name is verified as the operator's checks verified it.
		x.TLS = &dbsql.SourceTLS{CAFile: resources.ExternalSourceCAFile, VerifyName: true}
		id.Write(ca.Data[resources.ExternalCAKey])
		ep.CACertPEM = ca.Data[resources.ExternalCAKey]
	}
	x.ID = hex.EncodeToString(id.Sum(nil)[:8])
	x.Open = ep.Open // the cutover's fence, from the operator (the CA in memory)
	return x, nil
}

// externalCutover is the cutover asked of the external source ("" when none).
func externalCutover(x *topology.ExternalSource) string {
	if x == nil {
		return ""
	}
	return x.Cutover
}

// externalVerify is the verification asked of the external source ("" when none).
func externalVerify(x *topology.ExternalSource) string {
	if x == nil {
		return ""
	}
	return x.Verify
}

// externalID identifies the external source of a configuration ("" when none).
func externalID(x *topology.ExternalSource) string {
	if x == nil {
		return ""
	}
	return x.ID
}

// fallback is the way back to the server c was cut over from (spec.bootstrap.external.fallback,
// once status records the cutover and no fall back): nil otherwise. Without the account's
// Secret the way back cannot be opened, and Open says why (the status shows it).
func (m *Manager) fallback(ctx context.Context, c *dolphinv1.MySQLCluster) (*topology.Fallback, error) {
	if !resources.CutOver(c) || c.Status.Topology.ExternalSource.FellBack != nil {
		return nil, nil
	}
	ext := c.Spec.Bootstrap.External
	if ext == nil || ext.Fallback == nil {
		return nil, nil
	}
	f := &topology.Fallback{Source: c.Status.Topology.ExternalSource.Source, PrimaryHost: ext.Fallback.PrimaryHost,
		PrimaryPort: int(ext.Fallback.PrimaryPort), FallBack: c.Annotations[dolphinv1.FallBackAnnotation]}
	if f.FallBack != "" && f.FallBack == c.Status.Topology.ExternalSource.CutOver.IgnoredFallBackRequest {
		// Set before the cutover (a manifest that carries it): it never acts.
		f.FallBack = ""
	}
	if f.PrimaryPort == 0 {
		f.PrimaryPort = 3306
	}
	port := int(ext.Port)
	if port == 0 {
		port = 3306
	}
	var s corev1.Secret
	key := types.NamespacedName{Namespace: c.Namespace, Name: ext.AccountSecretName}
	err := m.APIReader().Get(ctx, key, &s)
	user, password := string(s.Data[resources.ExternalUsernameKey]), string(s.Data[resources.ExternalPasswordKey])
	switch {
	case apierrors.IsNotFound(err), err == nil && (user == "" || password == ""):
		why := fmt.Errorf("the Secret %s of spec.bootstrap.external (the account on the server, which the way back needs) does not exist or lacks %s or %s",
			ext.AccountSecretName, resources.ExternalUsernameKey, resources.ExternalPasswordKey)
		f.Open = func() (*sql.DB, error) { return nil, why }
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s of spec.bootstrap.external: %w", key, err)
	}
	ep := migrate.Endpoint{Host: ext.Host, Port: port, User: user, Password: password}
	id := sha256.New()
	fmt.Fprintf(id, "%s\x00%s\x00", user, password)
	if ext.CASecretName != "" {
		var ca corev1.Secret
		err := m.APIReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: ext.CASecretName}, &ca)
		switch {
		case apierrors.IsNotFound(err):
			// Never a plain connection where TLS was asked for.
			why := fmt.Errorf("the Secret %s of spec.bootstrap.external (the server's CA) does not exist", ext.CASecretName)
			f.Open = func() (*sql.DB, error) { return nil, why }
			return f, nil
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s of spec.bootstrap.external: %w", ext.CASecretName, err)
		}
		ep.CACertPEM = ca.Data[resources.ExternalCAKey]
		id.Write(ep.CACertPEM)
	}
	f.Open = ep.Open
	f.AccountID = hex.EncodeToString(id.Sum(nil)[:8])
	return f, nil
}

// fallbackID identifies the way back of a configuration ("" when none): a change of its
// address, account or request restarts the engine with it.
func fallbackID(f *topology.Fallback) string {
	if f == nil {
		return ""
	}
	return strings.Join([]string{f.Source, f.PrimaryHost, strconv.Itoa(f.PrimaryPort), f.FallBack, f.AccountID}, "\x00")
}

// externalFallBack is the fall-back request set while following ("" when none): the cutover
// records it as one that never acts, so a change restarts the engine with it.
func externalFallBack(x *topology.ExternalSource) string {
	if x == nil {
		return ""
	}
	return x.FallBack
}
