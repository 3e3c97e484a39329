package resources

import (
	"crypto/rand"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
)

// Keys of the credentials Secret. A user-supplied Secret must hold all of them.
const (
	RootPasswordKey        = "root-password"
	ReplicationPasswordKey = "replication-password"
	OperatorPasswordKey    = "operator-password"
	MonitorPasswordKey     = podlayout.MonitorPasswordKey
)

// Account names Dolphin creates on every instance.
const (
	OperatorUser    = "dolphin"
	ReplicationUser = "dolphin-repl"
	MonitorUser     = podlayout.MonitorUser
	// SchemaUser applies MySQLUser and MySQLDatabase resources on the primary. It has the
	// operator's password and every privilege except bypassing read_only.
	SchemaUser = "dolphin-schema"
)

// CredentialsLabel marks, set to "true", every Secret Dolphin reads passwords from: the
// generated credentials Secret, the credentials history Secret, and a user-supplied
// credentials Secret (Dolphin adds the label when it first reads that one). The operator's
// cache holds only Secrets with this label, so it never keeps a copy of anyone else's.
const CredentialsLabel = "mysql.dolphin.dev/credentials"

// CredentialsSecretLabels are the labels of the Secrets Dolphin creates: CommonLabels and
// CredentialsLabel.
func CredentialsSecretLabels(c *dolphinv1.MySQLCluster) map[string]string {
	l := CommonLabels(c)
	l[CredentialsLabel] = "true"
	return l
}

// CredentialKeys lists every key the credentials Secret must hold.
var CredentialKeys = []string{RootPasswordKey, ReplicationPasswordKey, OperatorPasswordKey, MonitorPasswordKey}

// NewPassword returns a random password of 26 base32 characters (130 bits from
// crypto/rand). The alphabet (A–Z, 2–7) needs no quoting in SQL, shells or URLs.
func NewPassword() string { return rand.Text() }

// GeneratedCredentialsSecret returns the Secret Dolphin creates when the user supplies none.
// It is created once and never overwritten: only missing keys are ever added (see
// MissingCredentialKeys), so a password in use is never changed behind the database's back.
func GeneratedCredentialsSecret(c *dolphinv1.MySQLCluster, newPassword func() string) *corev1.Secret {
	data := make(map[string][]byte, len(CredentialKeys))
	for _, k := range CredentialKeys {
		data[k] = []byte(newPassword())
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      NamesFor(c).GeneratedSecret,
			Namespace: c.Namespace,
			Labels:    CredentialsSecretLabels(c),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         dolphinv1.GroupVersion.String(),
				Kind:               "MySQLCluster",
				Name:               c.Name,
				UID:                c.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// MissingCredentialKeys lists the keys of CredentialKeys that s lacks or holds empty.
func MissingCredentialKeys(s *corev1.Secret) []string {
	var missing []string
	for _, k := range CredentialKeys {
		if len(s.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	return missing
}
