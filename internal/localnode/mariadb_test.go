package localnode

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestMariaDBPod runs a real mariadbd as a pod: the project's generated
// my.cnf from a configMap, the data directory on a provisioned PVC, install-db
// as an init container running as uid 999 with fsGroup 999, a TCP readiness
// probe, and a SQL client on the host reaching podIP:3306. The server runs under the
// operator's crash-on-stop command, and deleting the pod kills it without a clean shutdown.
func TestMariaDBPod(t *testing.T) {
	if _, err := exec.LookPath("mariadbd"); err != nil {
		if _, err := os.Stat("/usr/sbin/mariadbd"); err != nil {
			t.Skip("mariadbd not installed (hack/install-mariadb.sh)")
		}
	}
	e := startNode(t)
	ctx := context.Background()
	cnf, err := mycnf.Generate(mycnf.Input{Flavor: mycnf.FlavorMariaDB})
	if err != nil {
		t.Fatal(err)
	}
	cms := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "db-config", Namespace: e.ns}, Data: map[string]string{
			"my.cnf": cnf,
			// A client account for the host (install-db only creates root@localhost).
			// --bootstrap skips the grant tables, so write the row as install-db does. Its
			// name starts with dolphin, like Dolphin's own accounts: the server command's
			// start-up refusal of application logins (mycnf.StartupLoginRefusal) spares it.
			"init.sql": `INSERT INTO mysql.global_priv (Host, User, Priv) VALUES ('%', 'dolphintest', ` +
				`JSON_OBJECT('access', 0, 'plugin', 'mysql_native_password', ` +
				`'authentication_string', PASSWORD('secret')));` + "\n",
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-instance", Namespace: e.ns}, Data: map[string]string{
			filepath.Base(mycnf.InstanceConfigFile): mycnf.InstanceConfig(1, "db-0"),
		}},
	}
	for _, cm := range cms {
		if _, err := e.client.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: e.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	pvc, err = e.client.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	defaults := "--defaults-file=" + filepath.Join(mycnf.ConfigDir, "my.cnf")
	mounts := []corev1.VolumeMount{
		{Name: "data", MountPath: mycnf.DataDir},
		{Name: "config", MountPath: mycnf.ConfigDir, ReadOnly: true},
		{Name: "instance", MountPath: filepath.Dir(mycnf.InstanceConfigFile), ReadOnly: true},
		{Name: "run", MountPath: filepath.Dir(mycnf.SocketPath)},
	}
	ctr := func(name string, command ...string) corev1.Container {
		return corev1.Container{Name: name, Image: "docker.io/library/mariadb:10.11", Command: command, VolumeMounts: mounts}
	}
	// The server container's command as the operator builds it for a MariaDB cluster of more
	// than one instance: mariadbd under the crash-on-stop supervisor (docs/design/0038).
	server := ctr("mariadbd", podServerCommand(t)...)
	server.Ports = []corev1.ContainerPort{{Name: "mysql", ContainerPort: mycnf.Port}}
	server.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("mysql")}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeName:                      testNode,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](20),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999)},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
					ClaimName: pvc.Name}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db-config"}, DefaultMode: ptr.To[int32](0o444)}}},
				{Name: "instance", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db-instance"}}}},
				{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			InitContainers: []corev1.Container{
				ctr("install-db", "mariadb-install-db", defaults,
					"--auth-root-authentication-method=normal", "--skip-test-db"),
				ctr("client-account", "sh", "-c",
					"exec mariadbd "+defaults+" --bootstrap < "+filepath.Join(mycnf.ConfigDir, "init.sql")),
			},
			Containers: []corev1.Container{server},
		},
	}
	if _, err := e.client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, c := range []string{"install-db", "client-account", "mariadbd"} {
				t.Logf("%s log:\n%s", c, e.logOf(pod.Name, c))
			}
		}
	}()
	got := e.waitReady(t, pod.Name, 90*time.Second)

	// The PVC's folder holds the data directory, owned by the pod's user.
	pvc, err = e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(e.dir, "volumes", string(pvc.UID))
	if pvc.Spec.VolumeName != "pvc-"+string(pvc.UID) {
		t.Errorf("claim bound to %q, want the provisioned pvc-%s", pvc.Spec.VolumeName, pvc.UID)
	}
	fi, err := os.Stat(filepath.Join(folder, "ibdata1"))
	if err != nil {
		t.Fatalf("data directory not in the PVC folder: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 999 {
		t.Errorf("ibdata1 owned by uid %d, want 999", st.Uid)
	}

	dsn := fmt.Sprintf("dolphintest:secret@tcp(%s:%d)/?timeout=5s", got.Status.PodIP, mycnf.Port)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 over TCP to %s: %v (got %d)", got.Status.PodIP, err, one)
	}
	var user string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user); err != nil {
		t.Fatal(err)
	}
	t.Logf("connected to %s:%d as %s", got.Status.PodIP, mycnf.Port, user)

	// Deleting the pod stops the container as the kubelet does: SIGTERM to its main process,
	// the supervisor, which kills the server — no clean shutdown — and nothing is left of it.
	// The log is read through a descriptor opened before: the pod's folder goes with the pod.
	log, err := os.Open(filepath.Join(e.dir, "pods", e.ns+"_"+pod.Name, "mariadbd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	supervisor := containerPID(t, e.pod(t, pod.Name).Status.ContainerStatuses[0])
	mariadbd := dbtest.ChildPID(supervisor)
	if mariadbd == 0 {
		t.Fatalf("the server container's main process (pid %d) has no child: no supervisor", supervisor)
	}
	if err := e.client.CoreV1().Pods(e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pod object removed", func() error {
		if _, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
	text, err := io.ReadAll(log)
	if err != nil {
		t.Fatal(err)
	}
	// A server that heard the SIGTERM logs "Normal shutdown" before anything else.
	if strings.Contains(string(text), "Normal shutdown") || strings.Contains(string(text), "Shutdown complete") ||
		!strings.Contains(string(text), "ready for connections") {
		t.Errorf("the deleted pod's server was not killed: its log:\n%s", text)
	}
	if !processGone(mariadbd, 5*time.Second) {
		t.Errorf("mariadbd (pid %d) outlived its deleted pod", mariadbd)
	}
}

// podServerCommand is the server container's command of a 2-instance MariaDB cluster, exactly
// as the operator builds its StatefulSet (newest template generation).
func podServerCommand(t *testing.T) []string {
	t.Helper()
	c := resources.Defaulted(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "test"}})
	c.Spec.Instances = 2
	return resources.ServerCommand(c)
}
