package resources

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func passwords(p string) map[string][]byte {
	out := map[string][]byte{}
	for _, k := range CredentialKeys {
		out[k] = []byte(k + "-" + p)
	}
	return out
}

func TestCredentialsGeneration(t *testing.T) {
	a, b := passwords("a"), passwords("a")
	if CredentialsGeneration(a) != CredentialsGeneration(b) {
		t.Fatal("same passwords, different generations")
	}
	for _, k := range CredentialKeys {
		c := passwords("a")
		c[k] = []byte("changed")
		if CredentialsGeneration(c) == CredentialsGeneration(a) {
			t.Errorf("changing %s keeps the generation", k)
		}
	}
	// Moving bytes between keys is a different generation too.
	c := passwords("a")
	c[CredentialKeys[0]], c[CredentialKeys[1]] = append(c[CredentialKeys[0]], 'x'), c[CredentialKeys[1]][1:]
	if CredentialsGeneration(c) == CredentialsGeneration(a) {
		t.Error("shifting bytes between keys keeps the generation")
	}
}

func TestCredentialHistoryRoundTripAndPrune(t *testing.T) {
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", UID: "u"}}
	ga, gb, gc := CredentialsGeneration(passwords("a")), CredentialsGeneration(passwords("b")), CredentialsGeneration(passwords("c"))

	h := NextCredentialHistory(ReadCredentialHistory(nil), passwords("a"), nil)
	h = NextCredentialHistory(h, passwords("b"), nil) // nothing known about instances: keep all
	s := CredentialHistorySecret(c, h)
	if s.Name != "shop-credentials-history" || s.OwnerReferences[0].UID != "u" {
		t.Fatalf("secret meta: %+v", s.ObjectMeta)
	}
	read := ReadCredentialHistory(s)
	if !slices.Equal(read.Generations, []string{gb, ga}) {
		t.Fatalf("generations %v, want [%s %s]", read.Generations, gb, ga)
	}
	if string(read.Passwords[ga][OperatorPasswordKey]) != "operator-password-a" {
		t.Fatalf("passwords of %s: %q", ga, read.Passwords[ga])
	}
	// Rotating to c while an instance still has a: b is dropped, a is kept.
	next := NextCredentialHistory(read, passwords("c"), []string{ga, gc})
	if !slices.Equal(next.Generations, []string{gc, ga}) {
		t.Fatalf("after pruning: %v, want [%s %s]", next.Generations, gc, ga)
	}
	// Rotating back to a password set seen before keeps one entry for it.
	again := NextCredentialHistory(next, passwords("a"), []string{ga, gc})
	if !slices.Equal(again.Generations, []string{ga, gc}) {
		t.Fatalf("rotating back: %v", again.Generations)
	}
	// Bounded.
	h = ReadCredentialHistory(nil)
	for i := range 20 {
		h = NextCredentialHistory(h, passwords(string(rune('a'+i))), nil)
	}
	if len(h.Generations) != MaxCredentialGenerations {
		t.Fatalf("%d generations kept, want %d", len(h.Generations), MaxCredentialGenerations)
	}
	// An incomplete generation in a hand-edited Secret is ignored, not half used.
	s = CredentialHistorySecret(c, next)
	delete(s.Data, gc+"."+MonitorPasswordKey)
	if got := ReadCredentialHistory(s).Generations; !slices.Equal(got, []string{ga}) {
		t.Fatalf("incomplete generation read: %v", got)
	}
}
