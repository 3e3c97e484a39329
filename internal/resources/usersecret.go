package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Keys of the Secret Dolphin generates for a MySQLUser without spec.passwordSecretKeyRef:
// everything an application needs to connect through the primary Service.
const (
	UserSecretUsernameKey = "username"
	UserSecretPasswordKey = "password"
	UserSecretHostKey     = "host"
	UserSecretPortKey     = "port"
)

// DefaultUserPasswordKey is the key read from a user's password Secret when
// spec.passwordSecretKeyRef.key is empty.
const DefaultUserPasswordKey = "password"

// UserName is the account's user name on the server: spec.name, or metadata.name.
func UserName(u *dolphinv1.MySQLUser) string {
	if u.Spec.Name != "" {
		return u.Spec.Name
	}
	return u.Name
}

// UserHost is the account's host pattern ('%' when empty).
func UserHost(u *dolphinv1.MySQLUser) string {
	if u.Spec.Host != "" {
		return u.Spec.Host
	}
	return "%"
}

// DatabaseName is the database's name on the server: spec.name, or metadata.name.
func DatabaseName(d *dolphinv1.MySQLDatabase) string {
	if d.Spec.Name != "" {
		return d.Spec.Name
	}
	return d.Name
}

// UserPasswordSecretName is the Secret a MySQLUser's password is read from.
func UserPasswordSecretName(u *dolphinv1.MySQLUser) string {
	if r := u.Spec.PasswordSecretKeyRef; r != nil {
		return r.Name
	}
	return "mysqluser-" + u.Name
}

// UserPasswordKey is the key of the password in UserPasswordSecretName.
func UserPasswordKey(u *dolphinv1.MySQLUser) string {
	if r := u.Spec.PasswordSecretKeyRef; r != nil && r.Key != "" {
		return r.Key
	}
	return DefaultUserPasswordKey
}

// GeneratedUserSecret is the Secret Dolphin creates for a MySQLUser without
// spec.passwordSecretKeyRef: a generated password and where to connect (the cluster's primary
// Service). It is owned by the MySQLUser (deleted with it) and labelled so that the
// operator's cache holds it. It is created once; Dolphin never changes the password in it.
func GeneratedUserSecret(u *dolphinv1.MySQLUser, password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      UserPasswordSecretName(u),
			Namespace: u.Namespace,
			Labels: map[string]string{
				LabelManagedBy:   managedBy,
				LabelComponent:   "user",
				CredentialsLabel: "true",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         dolphinv1.GroupVersion.String(),
				Kind:               "MySQLUser",
				Name:               u.Name,
				UID:                u.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			UserSecretUsernameKey: []byte(UserName(u)),
			UserSecretPasswordKey: []byte(password),
			UserSecretHostKey:     []byte(u.Spec.Cluster + "-primary." + u.Namespace + ".svc"),
			UserSecretPortKey:     []byte(strconv.Itoa(MySQLPort)),
		},
	}
}
