package v1alpha1

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	crconversion "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"github.com/dolphin-operator/dolphin/api/v1beta1"
)

// webhookRoundTrips is how many random objects of each kind go through the handler and back.
const webhookRoundTrips = 300

// convertThrough sends one object to the conversion handler as the API server does (a
// ConversionReview in JSON) and returns the converted object's JSON.
func convertThrough(t *testing.T, h http.Handler, obj []byte, to string) []byte {
	t.Helper()
	review := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: types.UID("r"), DesiredAPIVersion: to,
			Objects: []runtime.RawExtension{{Raw: obj}}},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(body)))
	var out apiextensionsv1.ConversionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("conversion response: %v: %s", err, rec.Body.String())
	}
	if out.Response == nil || out.Response.Result.Status != "Success" || len(out.Response.ConvertedObjects) != 1 {
		t.Fatalf("conversion to %s failed: %+v", to, out.Response)
	}
	return out.Response.ConvertedObjects[0].Raw
}

// TestConversionWebhookRoundTrip: random objects of every kind, in JSON as the API server
// stores and sends them, go through controller-runtime's conversion handler with Dolphin's
// scheme (what the operator serves at /convert) to v1beta1 and back, and come back unchanged.
func TestConversionWebhookRoundTrip(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := crconversion.NewWebhookHandler(scheme, crconversion.NewRegistry())
	for i, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			f := filler(t, int64(3000+i))
			for n := 0; n < webhookRoundTrips; n++ {
				in := k.spoke()
				f.Fill(in)
				in.GetObjectKind().SetGroupVersionKind(GroupVersion.WithKind(k.name))
				// What the API server holds is JSON: normalize the random object through it
				// first (times to seconds, quantities to their canonical form).
				raw, err := json.Marshal(in)
				if err != nil {
					t.Fatal(err)
				}
				want := k.spoke()
				if err := json.Unmarshal(raw, want); err != nil {
					t.Fatal(err)
				}
				beta := convertThrough(t, h, raw, v1beta1.GroupVersion.String())
				var tm metav1.TypeMeta
				if err := json.Unmarshal(beta, &tm); err != nil || tm.APIVersion != v1beta1.GroupVersion.String() || tm.Kind != k.name {
					t.Fatalf("converted object is %+v (%v), want a %s %s", tm, err, v1beta1.GroupVersion, k.name)
				}
				back := convertThrough(t, h, beta, GroupVersion.String())
				got := k.spoke()
				if err := json.Unmarshal(back, got); err != nil {
					t.Fatal(err)
				}
				if !apiequality.Semantic.DeepEqual(want, got) {
					t.Fatalf("object %d changed through the webhook (-want +got):\n%s", n, cmp.Diff(want, got))
				}
			}
		})
	}
}
