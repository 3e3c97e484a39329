package plugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func newReportCmd(e *env) *cobra.Command {
	var output string
	var tailLines int64
	cmd := &cobra.Command{
		Use:   "report CLUSTER [-o FILE]",
		Short: "Write a support bundle: the cluster's objects, events, instance and operator logs (no Secret data)",
		Long: "Write a .tar.gz with what a person helping needs: the MySQLCluster and its backups,\n" +
			"accounts, databases, StatefulSet, pods, volumes, Services, disruption budget and\n" +
			"ConfigMaps; the namespace's events about them; the logs of every container of the\n" +
			"instances (and of the previous container after a restart); the operator's Deployment\n" +
			"and logs; the versions. Secrets appear by name only: their data is never read.",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			if output == "" {
				output = fmt.Sprintf("dolphin-report-%s-%s-%s.tar.gz", mc.Namespace, mc.Name, time.Now().UTC().Format("20060102-150405"))
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			n, err := e.writeReport(ctx, f, mc, tailLines)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("writing %s: %w", output, err)
			}
			fmt.Fprintf(e.out, "wrote %s (%d files)\n", output, n)
			return nil
		}),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "The file to write (default dolphin-report-<namespace>-<cluster>-<time>.tar.gz).")
	cmd.Flags().Int64Var(&tailLines, "tail", 5000, "Lines of each log to keep, from the end.")
	return cmd
}

// bundle writes files into a gzipped tar.
type bundle struct {
	tw    *tar.Writer
	now   time.Time
	files int
}

func (b *bundle) add(name string, data []byte) error {
	b.files++
	if err := b.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: b.now}); err != nil {
		return err
	}
	_, err := b.tw.Write(data)
	return err
}

// addObject writes obj as YAML, with its kind (the client leaves it out of typed objects).
func (b *bundle) addObject(name string, obj runtime.Object, s *runtime.Scheme) error {
	if gvk, err := apiutil.GVKForObject(obj, s); err == nil {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	y, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return b.add(name, y)
}

// writeReport writes the bundle of mc to w and returns how many files it holds. A part that
// cannot be read is noted in errors.txt, and the rest still written.
func (e *env) writeReport(ctx context.Context, w io.Writer, mc *dolphinv1.MySQLCluster, tailLines int64) (int, error) {
	gz := gzip.NewWriter(w)
	b := &bundle{tw: tar.NewWriter(gz), now: time.Now()}
	s := e.c.Scheme()
	var problems []string
	note := func(what string, err error) {
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", what, err))
		}
	}
	ns := client.InNamespace(mc.Namespace)
	if err := b.addObject("mysqlcluster.yaml", mc, s); err != nil {
		return b.files, err
	}
	// involved are the objects (kind/name) of the bundle: events about them are kept.
	involved := map[string]bool{"MySQLCluster/" + mc.Name: true}
	lists := []struct {
		file string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"mysqlbackups.yaml", &dolphinv1.MySQLBackupList{}, nil},
		{"mysqlusers.yaml", &dolphinv1.MySQLUserList{}, nil},
		{"mysqldatabases.yaml", &dolphinv1.MySQLDatabaseList{}, nil},
		{"statefulsets.yaml", &appsv1.StatefulSetList{}, nil},
		{"pods.yaml", &corev1.PodList{}, nil},
		{"persistentvolumeclaims.yaml", &corev1.PersistentVolumeClaimList{}, nil},
		{"services.yaml", &corev1.ServiceList{}, nil},
		{"poddisruptionbudgets.yaml", &policyv1.PodDisruptionBudgetList{}, nil},
		{"configmaps.yaml", &corev1.ConfigMapList{}, nil},
	}
	for _, l := range lists {
		if err := e.c.List(ctx, l.list, ns); err != nil {
			note(l.file, err)
			continue
		}
		if err := filterList(l.list, func(o client.Object) bool { return belongs(o, mc.Name) }); err != nil {
			return b.files, err
		}
		items, _ := meta.ExtractList(l.list)
		for _, it := range items {
			if o, ok := it.(client.Object); ok {
				gvk, _ := apiutil.GVKForObject(o, s)
				involved[gvk.Kind+"/"+o.GetName()] = true
			}
		}
		if err := b.addObject(l.file, l.list, s); err != nil {
			return b.files, err
		}
	}

	// Secrets by name only: Dolphin's for the cluster, and those its accounts' passwords are in.
	userSecrets := map[string]bool{}
	if users, err := e.usersOf(ctx, mc); err == nil {
		for _, u := range users {
			name, _ := userPasswordSecret(&u)
			userSecrets[name] = true
		}
	}
	var secrets corev1.SecretList
	if err := e.c.List(ctx, &secrets, ns); err != nil {
		note("secrets", err)
	} else {
		var names []string
		for _, sc := range secrets.Items {
			if belongs(&sc, mc.Name) || userSecrets[sc.Name] || sc.Name == credentialsSecret(mc) {
				names = append(names, fmt.Sprintf("%s (type %s, keys %d)", sc.Name, sc.Type, len(sc.Data)))
			}
		}
		if err := b.add("secrets.txt", []byte(strings.Join(names, "\n")+"\n")); err != nil {
			return b.files, err
		}
	}

	var events corev1.EventList
	if err := e.c.List(ctx, &events, ns); err != nil {
		note("events", err)
	} else {
		var lines []string
		for _, ev := range events.Items {
			if !involved[ev.InvolvedObject.Kind+"/"+ev.InvolvedObject.Name] {
				continue
			}
			t := ev.LastTimestamp.Time
			if t.IsZero() {
				t = ev.EventTime.Time
			}
			lines = append(lines, fmt.Sprintf("%s\t%s\t%s/%s\t%s\tx%d\t%s", t.UTC().Format(time.RFC3339), ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Count, ev.Message))
		}
		if err := b.add("events.txt", []byte(strings.Join(sortedStrings(lines), "\n")+"\n")); err != nil {
			return b.files, err
		}
	}

	cs, err := corev1client.NewForConfig(e.cfg)
	if err != nil {
		return b.files, err
	}
	var pods corev1.PodList
	if err := e.c.List(ctx, &pods, ns); err != nil {
		note("pods", err)
	}
	for _, p := range pods.Items {
		if !belongs(&p, mc.Name) {
			continue
		}
		if err := e.addLogs(ctx, b, cs, &p, "logs/"+p.Name, tailLines, note); err != nil {
			return b.files, err
		}
	}

	ops, err := e.operators(ctx, "")
	note("operator", err)
	for _, op := range ops {
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: op.Deployment}, &d); err == nil {
			if err := b.addObject("operator/"+op.Namespace+"-"+op.Deployment+".yaml", &d, s); err != nil {
				return b.files, err
			}
		}
		var opPods corev1.PodList
		if err := e.c.List(ctx, &opPods, client.InNamespace(op.Namespace), operatorSelector); err != nil {
			note("operator pods", err)
			continue
		}
		for _, p := range opPods.Items {
			if err := e.addLogs(ctx, b, cs, &p, "operator/"+p.Name, tailLines, note); err != nil {
				return b.files, err
			}
		}
	}
	var versions strings.Builder
	fmt.Fprintf(&versions, "kubectl-dolphin %s\n", Version)
	for _, op := range ops {
		fmt.Fprintf(&versions, "operator %s in %s/%s (%s)\n", op.Version, op.Namespace, op.Deployment, op.Image)
	}
	if err := b.add("versions.txt", []byte(versions.String())); err != nil {
		return b.files, err
	}
	if len(problems) > 0 {
		if err := b.add("errors.txt", []byte(strings.Join(problems, "\n")+"\n")); err != nil {
			return b.files, err
		}
	}
	if err := b.tw.Close(); err != nil {
		return b.files, err
	}
	return b.files, gz.Close()
}

// addLogs adds the logs of every container of p (and of its previous run, when it restarted).
func (e *env) addLogs(ctx context.Context, b *bundle, cs corev1client.CoreV1Interface, p *corev1.Pod, dir string, tailLines int64, note func(string, error)) error {
	restarted := map[string]bool{}
	for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		restarted[st.Name] = st.RestartCount > 0
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		for _, previous := range []bool{false, true} {
			if previous && !restarted[c.Name] {
				continue
			}
			raw, err := cs.Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous, TailLines: ptr.To(tailLines), Timestamps: true}).DoRaw(ctx)
			name := dir + "/" + c.Name + ".log"
			if previous {
				name = dir + "/" + c.Name + ".previous.log"
			}
			if err != nil {
				note(name, err)
				continue
			}
			if err := b.add(name, bytes.TrimLeft(raw, "\x00")); err != nil {
				return err
			}
		}
	}
	return nil
}

// belongs reports whether an object is one of the cluster's: a backup, account or database
// naming it in spec.cluster, or an object Dolphin made for it (labelled with the cluster as
// app.kubernetes.io/instance and made by Dolphin: managed-by dolphin, or the volumes' name
// mysql). A name alone proves nothing: another application's shop-analytics is not shop's.
func belongs(o client.Object, cluster string) bool {
	switch v := o.(type) {
	case *dolphinv1.MySQLBackup:
		return v.Spec.Cluster == cluster
	case *dolphinv1.MySQLUser:
		return v.Spec.Cluster == cluster
	case *dolphinv1.MySQLDatabase:
		return v.Spec.Cluster == cluster
	}
	l := o.GetLabels()
	return l[labelInstance] == cluster && (l[labelManagedBy] == managedBy || l[labelName] == volumeAppName)
}

// filterList keeps the items of list that keep says to.
func filterList(list client.ObjectList, keep func(client.Object) bool) error {
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	var kept []runtime.Object
	for _, it := range items {
		if o, ok := it.(client.Object); ok && keep(o) {
			kept = append(kept, it)
		}
	}
	return meta.SetList(list, kept)
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
