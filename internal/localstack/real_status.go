package localstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// kubeClient is a client of the local cluster's API server for Kubernetes' own types.
func kubeClient(kubeconfig string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, nil
}

// printClusterIPServices lists the Services Dolphin made, with the ClusterIP address this
// host reaches them at through the real node's kube-proxy (`dolphin local status`).
func printClusterIPServices(ctx context.Context, out io.Writer, kubeconfig string) error {
	c, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy}); err != nil {
		return fmt.Errorf("listing Dolphin's Services: %w", err)
	}
	fmt.Fprintln(out, "\nServices, reachable from this host at their ClusterIPs through kube-proxy:")
	if len(svcs.Items) == 0 {
		fmt.Fprintln(out, "  none yet (apply a MySQLCluster)")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue // headless: the pods' own addresses
		}
		fmt.Fprintf(tw, "  %s/%s\t%s\n", s.Namespace, s.Name, net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(s.Spec.Ports[0].Port))))
	}
	return tw.Flush()
}
