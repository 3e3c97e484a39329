package plugin

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// restoreTarget is what a restore restores: a backup as it is, or a point in time.
type restoreTarget struct {
	Backup string     // a MySQLBackup of the source's namespace; "" lets Dolphin choose for a point in time
	Time   *time.Time // commits at or before it
	GTID   string     // up to and including it
	Latest bool       // the archive's end
}

func newRestoreCmd(e *env) *cobra.Command {
	var t restoreTarget
	var name, toTime string
	cmd := &cobra.Command{
		Use:   "restore CLUSTER --name NEW (--backup BACKUP | --to-time TIME | --to-gtid GTID | --latest)",
		Short: "Print the manifest of a new cluster restored from CLUSTER's backups (to a point in time with its archive)",
		Long: "Print a MySQLCluster manifest, NEW, that starts from CLUSTER's backup (--backup) or from\n" +
			"its backups and binlog archive at a point in time (--to-time in RFC 3339, --to-gtid, or\n" +
			"--latest; Dolphin then picks the backup). The new cluster copies CLUSTER's engine,\n" +
			"instances, storage, resources, settings, TLS, pod template, failover and durability;\n" +
			"not its Services, backups or credentials. Review it, then: | kubectl apply -f -",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if toTime != "" {
				tm, err := time.Parse(time.RFC3339, toTime)
				if err != nil {
					return fmt.Errorf("--to-time %q: want RFC 3339, e.g. 2026-12-06T07:30:00Z: %w", toTime, err)
				}
				t.Time = &tm
			}
			mc, err := e.cluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out, err := restoreManifest(mc, name, t)
			if err != nil {
				return err
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
			if err != nil {
				return err
			}
			delete(obj, "status") // what the API server fills in is no part of a manifest
			unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
			b, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "# Restored from MySQLCluster %s/%s by kubectl dolphin restore.\n", mc.Namespace, mc.Name)
			_, err = e.out.Write(b)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "Name of the new cluster (required).")
	cmd.Flags().StringVar(&t.Backup, "backup", "", "Restore this MySQLBackup (with a point in time: start from it).")
	cmd.Flags().StringVar(&toTime, "to-time", "", "Restore every transaction committed at or before this time (RFC 3339).")
	cmd.Flags().StringVar(&t.GTID, "to-gtid", "", "Restore up to and including this GTID position.")
	cmd.Flags().BoolVar(&t.Latest, "latest", false, "Restore as far as the binlog archive goes.")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// restoreManifest builds the new cluster from the source: a pure function (tests compare it).
func restoreManifest(src *dolphinv1.MySQLCluster, name string, t restoreTarget) (*dolphinv1.MySQLCluster, error) {
	points := 0
	for _, set := range []bool{t.Time != nil, t.GTID != "", t.Latest} {
		if set {
			points++
		}
	}
	switch {
	case name == "" || name == src.Name:
		return nil, fmt.Errorf("--name must name a new cluster, not %q", name)
	case points > 1:
		return nil, fmt.Errorf("give one of --to-time, --to-gtid, --latest")
	case points == 0 && t.Backup == "":
		return nil, fmt.Errorf("give --backup, or a point in time (--to-time, --to-gtid, --latest)")
	}
	s := src.Spec
	spec := dolphinv1.MySQLClusterSpec{
		Engine: s.Engine, Instances: s.Instances, Storage: s.Storage, Resources: s.Resources,
		MySQLConfig: s.MySQLConfig, PodTemplate: s.PodTemplate, Failover: s.Failover, Durability: s.Durability,
		TLS: dolphinv1.TLSSpec{Enabled: s.TLS.Enabled, RequireForClients: s.TLS.RequireForClients},
	}
	bs := &dolphinv1.BootstrapSpec{}
	if t.Backup != "" {
		bs.Backup = &dolphinv1.BackupReference{Name: t.Backup}
	}
	if points == 1 {
		pit := &dolphinv1.PointInTimeTarget{GTID: t.GTID, Latest: t.Latest}
		if t.Time != nil {
			pit.Time = &metav1.Time{Time: t.Time.UTC()}
		}
		if t.Backup == "" {
			pit.Cluster = src.Name
		}
		bs.PointInTime = pit
	}
	spec.Bootstrap = bs
	return &dolphinv1.MySQLCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: dolphinv1.GroupVersion.String(), Kind: "MySQLCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: src.Namespace},
		Spec:       spec,
	}, nil
}
