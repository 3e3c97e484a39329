package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// operatorSelector finds the operator's Deployments (config/manager and the dolphin chart
// label them so).
var operatorSelector = client.MatchingLabels{"app.kubernetes.io/name": "dolphin-operator"}

// operatorInstall is one Dolphin operator found in the cluster.
type operatorInstall struct {
	Namespace, Deployment, Image, Version string
}

func newVersionCmd(e *env) *cobra.Command {
	var operatorNamespace string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the operator's, and warn when they differ",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(e.out, "kubectl-dolphin %s\n", Version)
			ops, err := e.operators(cmd.Context(), operatorNamespace)
			if err != nil {
				fmt.Fprintf(e.errOut, "operator: not found (%v)\n", err)
				return nil
			}
			if len(ops) == 0 {
				fmt.Fprintln(e.errOut, "operator: no Deployment labelled app.kubernetes.io/name=dolphin-operator found")
				return nil
			}
			for _, op := range ops {
				fmt.Fprintf(e.out, "operator %s in %s/%s (%s)\n", op.Version, op.Namespace, op.Deployment, op.Image)
				if w := skew(Version, op.Version); w != "" {
					fmt.Fprintf(e.errOut, "warning: %s\n", w)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&operatorNamespace, "operator-namespace", "", "Look for the operator in this namespace only (default: every namespace you may list).")
	return cmd
}

// operators finds the operator Deployments: the chart's version label, else the image's tag.
func (e *env) operators(ctx context.Context, ns string) ([]operatorInstall, error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, operatorSelector, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	var out []operatorInstall
	for _, d := range list.Items {
		op := operatorInstall{Namespace: d.Namespace, Deployment: d.Name, Version: d.Labels["app.kubernetes.io/version"]}
		if cs := d.Spec.Template.Spec.Containers; len(cs) > 0 {
			op.Image = cs[0].Image
		}
		if op.Version == "" {
			op.Version = imageTag(op.Image)
		}
		out = append(out, op)
	}
	return out, nil
}

// imageTag is the tag of an image reference ("" for a digest or none).
func imageTag(image string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// skew says what a user should know when plugin and operator versions differ: nothing when
// they are equal, or when both are released versions of the same minor release.
func skew(plugin, operator string) string {
	switch {
	case operator == "":
		return "the operator's version is unknown (no version label, the image has no tag)"
	case plugin == operator:
		return ""
	case plugin == "dev" || operator == "dev":
		return fmt.Sprintf("plugin %s and operator %s: a development build on one side, no compatibility promised", plugin, operator)
	}
	pm, om := minor(plugin), minor(operator)
	if pm != "" && pm == om {
		return ""
	}
	return fmt.Sprintf("plugin %s and operator %s differ: use the plugin of the operator's release (annotations and status fields may differ)", plugin, operator)
}

// minor is "vX.Y" of a version "vX.Y.Z…" ("" when it is none).
func minor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "." + parts[1]
}
