package plugin

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// TestExternalLinesWayBack: kubectl dolphin status says whether the server follows the cluster
// after the cutover, a failed fall back, and the fall back once done.
func TestExternalLinesWayBack(t *testing.T) {
	now := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	at := metav1.NewTime(now.Add(-2 * time.Minute))
	cut := &dolphinv1.CutoverRecord{Instance: "db-0", At: at, Position: "0-9-100"}
	for _, tc := range []struct {
		name string
		x    dolphinv1.ExternalReplication
		want []string
	}{
		{"following the cluster", dolphinv1.ExternalReplication{Source: "old:3306", CutOver: cut,
			Fallback: &dolphinv1.FallbackReplication{Replicating: true, LagSeconds: ptr.To[int64](0)}},
			[]string{"Way back: old:3306 follows the cluster, 0 s behind (kubectl dolphin fall-back)"}},
		{"not following, a failed fall back", dolphinv1.ExternalReplication{Source: "old:3306", CutOver: cut,
			Fallback:            &dolphinv1.FallbackReplication{Error: "Access denied"},
			LastFallBackFailure: &dolphinv1.CutoverFailure{Request: "r1", At: at, Error: "RESET SLAVE denied"}},
			[]string{"! Way back: old:3306 does not follow the cluster: Access denied", `! Fall back "r1" failed 2m ago: RESET SLAVE denied`}},
		{"fell back", dolphinv1.ExternalReplication{Source: "old:3306", CutOver: cut,
			FellBack: &dolphinv1.CutoverRecord{Instance: "old:3306", At: at, Position: "0-1000-7", WritePauseMilliseconds: 31}},
			[]string{"Fell back to old:3306 2m ago at 0-1000-7, write pause 31 ms: this cluster is read-only and takes no clients"}},
	} {
		got := externalLines(&tc.x, now)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
}
