package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// parseCRD reads one CRD manifest.
func parseCRD(b []byte, from string) (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
		return nil, fmt.Errorf("%s: not a CustomResourceDefinition (kind %q, name %q)", from, crd.Kind, crd.Name)
	}
	return &crd, nil
}

// loadDir reads every *.yaml CRD in dir, by name.
func loadDir(dir string) (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd, err := parseCRD(b, f)
		if err != nil {
			return nil, err
		}
		out[crd.Name] = crd
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRD under %s", dir)
	}
	return out, nil
}

// loadGit reads every *.yaml CRD under dir (relative to the repository root) as it is at ref.
func loadGit(repo, ref, dir string) (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	ls, err := git(repo, "ls-tree", "--name-only", ref+":"+dir)
	if err != nil {
		return nil, err
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	names := strings.Fields(ls)
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		b, err := git(repo, "show", ref+":"+dir+"/"+n)
		if err != nil {
			return nil, err
		}
		crd, err := parseCRD([]byte(b), ref+":"+dir+"/"+n)
		if err != nil {
			return nil, err
		}
		out[crd.Name] = crd
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRD under %s at %s", dir, ref)
	}
	return out, nil
}

// lastReleaseTag is the newest tag v* reachable from HEAD, "" when there is none.
func lastReleaseTag(repo string) string {
	out, err := git(repo, "describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
