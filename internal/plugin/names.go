package plugin

import dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"

// The names Dolphin gives a cluster's objects, as internal/resources builds them (a test keeps
// the two equal; the plugin does not link the builders).

func primaryService(c *dolphinv1.MySQLCluster) string { return c.Name + "-primary" }

func credentialsSecret(c *dolphinv1.MySQLCluster) string {
	if c.Spec.Credentials.SecretName != "" {
		return c.Spec.Credentials.SecretName
	}
	return c.Name + "-credentials"
}

// caSecret is the Secret whose ca.crt clients trust the cluster's servers with.
func caSecret(c *dolphinv1.MySQLCluster) string {
	if c.Spec.TLS.CertificateSecret != "" {
		return c.Spec.TLS.CertificateSecret
	}
	return c.Name + "-ca"
}

func userPasswordSecret(u *dolphinv1.MySQLUser) (name, key string) {
	if r := u.Spec.PasswordSecretKeyRef; r != nil {
		key = r.Key
		if key == "" {
			key = "password"
		}
		return r.Name, key
	}
	return "mysqluser-" + u.Name, "password"
}

// userName is the account's name on the server.
func userName(u *dolphinv1.MySQLUser) string {
	if u.Spec.Name != "" {
		return u.Spec.Name
	}
	return u.Name
}

const (
	rootPasswordKey = "root-password"
	mysqlPort       = 3306
)

// The labels Dolphin puts on what it makes for a cluster (resources.CommonLabels; the data
// volumes carry resources.SelectorLabels).
const (
	labelInstance  = "app.kubernetes.io/instance"
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelName      = "app.kubernetes.io/name"
	managedBy      = "dolphin"
	volumeAppName  = "mysql"
)
