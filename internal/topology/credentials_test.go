package topology

import (
	"slices"
	"testing"
)

func TestDecideRotation(t *testing.T) {
	view := func(primaryGen, replicaGen, replicaRepl string, needs bool) ClusterView {
		v := cluster("db-0",
			inst(0).writable().executed("0-1-10"),
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10"))
		v.CredentialsGeneration = "new"
		v.Instances[0].CredentialsGeneration, v.Instances[0].NeedsAccounts = primaryGen, needs && primaryGen != "new"
		v.Instances[1].CredentialsGeneration, v.Instances[1].NeedsAccounts = replicaGen, needs && replicaGen != "new"
		v.Instances[1].ReplicationGeneration = replicaRepl
		return v
	}
	cases := []struct {
		name string
		v    ClusterView
		plan []string
	}{
		{"everything old: accounts rotated everywhere, then the replica re-pointed",
			view("old", "old", "old", true),
			[]string{"EnsureAccounts(db-0)", "EnsureAccounts(db-1)", "Replicate(db-1 from db-0)"}},
		{"primary rotated, replica still connects with the old password",
			view("new", "new", "old", false),
			[]string{"Replicate(db-1 from db-0)"}},
		{"the primary has not taken the new passwords: the replica keeps the old one",
			view("old", "new", "old", false),
			nil},
		{"unknown replication generation is left alone",
			view("new", "new", "", false),
			nil},
		{"rotated and re-pointed: nothing to do",
			view("new", "new", "new", false),
			nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := steps(Decide(tc.v)); !slices.Equal(got, tc.plan) {
				t.Fatalf("plan %v, want %v", got, tc.plan)
			}
		})
	}
	// A replica whose source refused its password (1045) is re-pointed whatever is recorded.
	v := view("new", "new", "", false)
	v.Instances[1].Status.Replica.IORunning, v.Instances[1].Status.Replica.LastIOErrno = false, errnoAccessDenied
	if got := steps(Decide(v)); !slices.Equal(got, []string{"Replicate(db-1 from db-0)"}) {
		t.Fatalf("access denied receiver: plan %v", got)
	}
}
