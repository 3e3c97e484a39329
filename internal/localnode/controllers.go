package localnode

import (
	"context"
	"fmt"
	"runtime"
	"strconv"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// podSyncWorkers is how many pods virtual-kubelet creates or deletes at once.
const podSyncWorkers = 8

// runControllers runs virtual-kubelet's node controller (registration, status
// and Lease heartbeats) and pod controller (pods bound to the node -> p) until
// ctx is done.
func runControllers(ctx context.Context, client kubernetes.Interface, p *provider, opts Options) error {
	podInformers := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
		}))
	otherInformers := informers.NewSharedInformerFactory(client, 0)

	broadcaster := record.NewBroadcaster()
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "dolphin-localnode", Host: opts.NodeName})

	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:         client.CoreV1(),
		PodInformer:       podInformers.Core().V1().Pods(),
		EventRecorder:     recorder,
		Provider:          p,
		ConfigMapInformer: otherInformers.Core().V1().ConfigMaps(),
		SecretInformer:    otherInformers.Core().V1().Secrets(),
		ServiceInformer:   otherInformers.Core().V1().Services(),
		// The provider resolves env itself, when status.podIP is known.
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return fmt.Errorf("localnode: pod controller: %w", err)
	}
	nc, err := node.NewNodeController(node.NewNaiveNodeProvider(), nodeSpec(opts, p.netw), client.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(client.CoordinationV1().Leases(corev1.NamespaceNodeLease), node.DefaultLeaseDuration))
	if err != nil {
		return fmt.Errorf("localnode: node controller: %w", err)
	}

	podInformers.Start(ctx.Done())
	otherInformers.Start(ctx.Done())
	errc := make(chan error, 2)
	go func() { errc <- pc.Run(ctx, podSyncWorkers) }()
	go func() { errc <- nc.Run(ctx) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if err == nil {
			err = fmt.Errorf("controller stopped")
		}
		return fmt.Errorf("localnode: %w", err)
	}
}

// nodeSpec is the Node registered: Ready from the start (the node controller
// only starts once the pod controller has synced), with the bridge's address
// as its InternalIP.
func nodeSpec(opts Options, netw *network) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(opts.CPU),
		corev1.ResourceMemory:           resource.MustParse(opts.Memory),
		corev1.ResourcePods:             resource.MustParse(strconv.Itoa(opts.Pods)),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: opts.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:     opts.NodeName,
				corev1.LabelOSStable:     runtime.GOOS,
				corev1.LabelArchStable:   runtime.GOARCH,
				"dolphin.dev/local-node": "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: opts.PodCIDR, PodCIDRs: []string{opts.PodCIDR}},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: netw.gateway.String()},
				{Type: corev1.NodeHostName, Address: opts.NodeName},
			},
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "dolphin local node is running pods as host processes"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "pods are on bridge "+opts.Bridge),
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
				KubeletVersion:          "v1.37.2-dolphin-local",
				ContainerRuntimeVersion: "dolphin-local://host-processes",
			},
		},
	}
}
