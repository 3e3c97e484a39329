package v1alpha1

import (
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/randfill"

	"github.com/dolphin-operator/dolphin/api/v1beta1"
)

// roundTrips is how many random objects of each kind go through each direction.
const roundTrips = 2000

// pair is one kind in both versions.
type pair struct {
	name  string
	spoke func() conversion.Convertible
	hub   func() conversion.Hub
}

var kinds = []pair{
	{"MySQLCluster", func() conversion.Convertible { return &MySQLCluster{} }, func() conversion.Hub { return &v1beta1.MySQLCluster{} }},
	{"MySQLBackup", func() conversion.Convertible { return &MySQLBackup{} }, func() conversion.Hub { return &v1beta1.MySQLBackup{} }},
	{"MySQLUser", func() conversion.Convertible { return &MySQLUser{} }, func() conversion.Hub { return &v1beta1.MySQLUser{} }},
	{"MySQLDatabase", func() conversion.Convertible { return &MySQLDatabase{} }, func() conversion.Hub { return &v1beta1.MySQLDatabase{} }},
}

// filler fills objects the way apimachinery's own round-trip tests do (valid object
// metadata), with quantities that hold a value.
func filler(t *testing.T, seed int64) *randfill.Filler {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	quantity := func(q *resource.Quantity, c randfill.Continue) {
		*q = *resource.NewMilliQuantity(c.Int63n(1<<40), resource.BinarySI)
	}
	f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), runtimeserializer.NewCodecFactory(scheme))
	return f.NilChance(0.3).NumElements(0, 3).Funcs(quantity)
}

// TestRoundTripThroughHub: every v1alpha1 object survives v1alpha1 → v1beta1 → v1alpha1 unchanged.
func TestRoundTripThroughHub(t *testing.T) {
	for i, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			f := filler(t, int64(1000+i))
			for n := 0; n < roundTrips; n++ {
				in := k.spoke()
				f.Fill(in)
				in.GetObjectKind().SetGroupVersionKind(GroupVersion.WithKind(k.name))
				hub := k.hub()
				if err := in.ConvertTo(hub); err != nil {
					t.Fatalf("ConvertTo: %v", err)
				}
				out := k.spoke()
				if err := out.ConvertFrom(hub); err != nil {
					t.Fatalf("ConvertFrom: %v", err)
				}
				out.GetObjectKind().SetGroupVersionKind(in.GetObjectKind().GroupVersionKind())
				if !apiequality.Semantic.DeepEqual(in, out) {
					t.Fatalf("round trip %d changed the object (-in +out):\n%s", n, cmp.Diff(in, out))
				}
			}
		})
	}
}

// TestRoundTripFromHub: every v1beta1 object survives v1beta1 → v1alpha1 → v1beta1 unchanged.
func TestRoundTripFromHub(t *testing.T) {
	for i, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			f := filler(t, int64(2000+i))
			for n := 0; n < roundTrips; n++ {
				in := k.hub()
				f.Fill(in)
				in.GetObjectKind().SetGroupVersionKind(v1beta1.GroupVersion.WithKind(k.name))
				spoke := k.spoke()
				if err := spoke.ConvertFrom(in); err != nil {
					t.Fatalf("ConvertFrom: %v", err)
				}
				out := k.hub()
				if err := spoke.ConvertTo(out); err != nil {
					t.Fatalf("ConvertTo: %v", err)
				}
				out.GetObjectKind().SetGroupVersionKind(in.GetObjectKind().GroupVersionKind())
				if !apiequality.Semantic.DeepEqual(in, out) {
					t.Fatalf("round trip %d changed the object (-in +out):\n%s", n, cmp.Diff(in, out))
				}
			}
		})
	}
}

// TestConversionMovesRenamedFields pins what the fuzz test cannot see: that the renamed
// fields land in their new place (a conversion that dropped both ways would round-trip a
// zero value).
func TestConversionMovesRenamedFields(t *testing.T) {
	attempts := int32(7)
	in := &MySQLCluster{Spec: MySQLClusterSpec{Replicas: 5, Failover: FailoverSpec{DetectionAttempts: attempts}}}
	var hub v1beta1.MySQLCluster
	if err := in.ConvertTo(&hub); err != nil {
		t.Fatal(err)
	}
	if hub.Spec.Instances != 5 || hub.Spec.Failover.Detection.Attempts != attempts {
		t.Fatalf("v1beta1 spec: instances=%d detection.attempts=%d, want 5 and 7", hub.Spec.Instances, hub.Spec.Failover.Detection.Attempts)
	}
	if err := in.ConvertTo(&v1beta1.MySQLBackup{}); err == nil {
		t.Fatal("converting a MySQLCluster into a MySQLBackup hub did not fail")
	}
}
