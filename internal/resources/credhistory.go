package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// GenerationsAnnotation on the credentials history Secret lists the generations it holds,
// newest first, comma-separated.
const GenerationsAnnotation = "mysql.dolphin.dev/credentials-generations"

// MaxCredentialGenerations bounds how many generations the history keeps. An instance that
// missed more rotations than this while down refuses every known password and is reported.
const MaxCredentialGenerations = 8

// CredentialsGeneration identifies the passwords of a credentials Secret: a hash of them, so
// that status can say which passwords each instance has without holding any.
func CredentialsGeneration(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range CredentialKeys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(data[k])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// CredentialsHistorySecretName is the Dolphin-owned Secret that keeps the passwords of
// earlier credentials generations, so that instances that still have them can be logged in
// to and rotated (also after an operator restart).
func CredentialsHistorySecretName(c *dolphinv1.MySQLCluster) string {
	return c.Name + "-credentials-history"
}

// CredentialHistory is the content of the history Secret: generations newest first, and
// each generation's passwords by credentials key.
type CredentialHistory struct {
	Generations []string
	Passwords   map[string]map[string][]byte
}

// ReadCredentialHistory decodes a history Secret; nil gives an empty history.
func ReadCredentialHistory(s *corev1.Secret) CredentialHistory {
	h := CredentialHistory{Passwords: map[string]map[string][]byte{}}
	if s == nil {
		return h
	}
	for _, g := range strings.Split(s.Annotations[GenerationsAnnotation], ",") {
		if g == "" {
			continue
		}
		pw := map[string][]byte{}
		for _, k := range CredentialKeys {
			if v, ok := s.Data[g+"."+k]; ok {
				pw[k] = v
			}
		}
		if len(pw) == len(CredentialKeys) {
			h.Generations = append(h.Generations, g)
			h.Passwords[g] = pw
		}
	}
	return h
}

// NextCredentialHistory adds the current passwords to h as the newest generation and
// prunes generations no instance needs: a generation is kept while it is current, or
// named in inUse (the generations the instances' accounts and replication connections
// have), up to MaxCredentialGenerations. inUse nil (nothing known about the instances yet)
// keeps every generation.
func NextCredentialHistory(h CredentialHistory, current map[string][]byte, inUse []string) CredentialHistory {
	gen := CredentialsGeneration(current)
	next := CredentialHistory{Passwords: map[string]map[string][]byte{}}
	add := func(g string, pw map[string][]byte) {
		if len(next.Generations) < MaxCredentialGenerations && !slices.Contains(next.Generations, g) {
			next.Generations = append(next.Generations, g)
			next.Passwords[g] = pw
		}
	}
	cur := map[string][]byte{}
	for _, k := range CredentialKeys {
		cur[k] = current[k]
	}
	add(gen, cur)
	for _, g := range h.Generations {
		if inUse == nil || slices.Contains(inUse, g) {
			add(g, h.Passwords[g])
		}
	}
	return next
}

// CredentialHistorySecret builds the history Secret of c holding h.
func CredentialHistorySecret(c *dolphinv1.MySQLCluster, h CredentialHistory) *corev1.Secret {
	data := map[string][]byte{}
	for _, g := range h.Generations {
		for k, v := range h.Passwords[g] {
			data[g+"."+k] = v
		}
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        CredentialsHistorySecretName(c),
			Namespace:   c.Namespace,
			Labels:      CredentialsSecretLabels(c),
			Annotations: map[string]string{GenerationsAnnotation: strings.Join(h.Generations, ",")},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: dolphinv1.GroupVersion.String(), Kind: "MySQLCluster", Name: c.Name, UID: c.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}
