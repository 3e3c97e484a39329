package resources

import (
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
)

// StopReleasedFile is the file whose existence ends the server container's preStop hold
// (holdForSwitchoverCommand): the agent creates it when the operator releases the instance
// (agent.Client.ReleaseStop). It lies in the pod's run directory, an emptyDir shared by the
// server and agent containers, so a new pod never starts with it.
var StopReleasedFile = path.Join(path.Dir(mycnf.SocketPath), StopReleasedFileName)

// StopReleasedFileName is StopReleasedFile's name in the run directory, beside the server's
// socket (where the agent finds it from its --socket).
const StopReleasedFileName = podlayout.StopReleasedFileName

// holdForSwitchoverSeconds bounds the preStop hold: long enough for a switchover on a loaded
// machine (fence, the target applying what it received, promotion: ~1 s, up to the engine's
// 10 s wait for the target), short enough that an operator that is down delays a drain by no
// more than this per pod, and well inside the pod's termination grace period
// (terminationGracePeriod), so the stop that follows still has its time.
const holdForSwitchoverSeconds = 25

// HoldForSwitchoverSeconds is how long a deleted pod's server waits at most for the operator
// to release it (holdForSwitchoverSeconds).
const HoldForSwitchoverSeconds = holdForSwitchoverSeconds

// HoldsForSwitchover reports whether pod's server container has the preStop hold (template
// generation 4 on, more than one instance).
func HoldsForSwitchover(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == ContainerMySQLD {
			return c.Lifecycle != nil && c.Lifecycle.PreStop != nil
		}
	}
	return false
}

// holdsForSwitchover says whether c's pods at generation hold their stop for a switchover:
// clusters of more than one instance, from template generation 4.
func holdsForSwitchover(c *dolphinv1.MySQLCluster, generation int) bool {
	return generation >= generationHoldForSwitchover && c.Spec.Instances > 1
}

// holdForSwitchoverLifecycle is the preStop hook of the server's and the agent's containers.
func holdForSwitchoverLifecycle() *corev1ac.LifecycleApplyConfiguration {
	return corev1ac.Lifecycle().WithPreStop(corev1ac.LifecycleHandler().
		WithExec(corev1ac.ExecAction().WithCommand(holdForSwitchoverCommand()...)))
}

// holdForSwitchoverCommand is the server container's preStop hook in a cluster of more than
// one instance (template generation 4 on, docs/design/0051). The kubelet runs it when the
// pod is deleted or evicted, and sends the stop signal only once it ends: meanwhile the server
// keeps running, so the operator can switch the primary role over to a replica (a planned
// change, ~0.3 s without writes) instead of failing over after the server is gone. The hook
// waits until the operator releases the instance — once it is no primary, or no switchover
// can happen — or holdForSwitchoverSeconds have passed. It is a POSIX sh loop with the image's
// /bin/sh and sleep: no binary, credential or network of its own, nothing written, no "$("
// (which the kubelet would expand in a container's command).
func holdForSwitchoverCommand() []string {
	return []string{"/bin/sh", "-c", holdForSwitchoverScript(StopReleasedFile, holdForSwitchoverSeconds)}
}

// holdForSwitchoverScript waits until released exists, checking every second, for at most
// seconds seconds.
func holdForSwitchoverScript(released string, seconds int) string {
	ticks := make([]string, seconds)
	for i := range ticks {
		ticks[i] = strconv.Itoa(i + 1)
	}
	return "for t in " + strings.Join(ticks, " ") + "; do\n" +
		"  [ -e " + released + " ] && exit 0\n" +
		"  sleep 1\n" +
		"done\n" +
		"echo \"dolphin: not released for the stop within " + strconv.Itoa(seconds) + " s: stopping anyway\" >&2\n"
}
