package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func main() {
	repo := flag.String("repo", ".", "the repository's root")
	newDir := flag.String("new", "config/crd/bases", "the CRDs as they are now (relative to -repo)")
	baseline := flag.String("baseline", "config/crd/baseline", "the CRDs of the last release, used while the repository has no release tag (relative to -repo)")
	against := flag.String("against", "", "compare with the CRDs at this git ref instead (default: the newest tag v*, else -baseline)")
	exceptionsFile := flag.String("exceptions", "config/crd/gate-exceptions.yaml", "the reviewed intentional breaks (relative to -repo)")
	flag.Parse()
	if err := run(*repo, *newDir, *baseline, *against, *exceptionsFile); err != nil {
		fmt.Fprintln(os.Stderr, "crd-gate:", err)
		os.Exit(1)
	}
}

func run(repo, newDir, baseline, against, exceptionsFile string) error {
	current, err := loadDir(filepath.Join(repo, newDir))
	if err != nil {
		return err
	}
	ref := against
	if ref == "" {
		ref = lastReleaseTag(repo)
	}
	var (
		what     string
		previous map[string]*apiextensionsv1.CustomResourceDefinition
	)
	if ref != "" {
		previous, err = loadGit(repo, ref, newDir)
		what = "release " + ref
	} else {
		previous, err = loadDir(filepath.Join(repo, baseline))
		what = "the committed baseline " + baseline + " (no release tag yet)"
	}
	if err != nil {
		return err
	}
	findings, err := CompareSets(previous, current)
	if err != nil {
		return err
	}
	exceptions, err := loadExceptions(filepath.Join(repo, exceptionsFile))
	if err != nil {
		return err
	}
	failing, excepted, unused := applyExceptions(findings, exceptions)
	for _, f := range excepted {
		fmt.Println("excepted:", f)
	}
	for _, f := range failing {
		fmt.Println("BREAKING:", f)
	}
	for _, e := range unused {
		fmt.Printf("STALE EXCEPTION: %s %s %s [%s]: matches no change; remove it from %s\n", e.CRD, e.Version, e.Path, e.Rule, exceptionsFile)
	}
	fmt.Printf("crd-gate: %d CRDs compared with %s: %d breaking, %d excepted, %d stale exceptions\n",
		len(current), what, len(failing), len(excepted), len(unused))
	if len(failing) > 0 || len(unused) > 0 {
		return fmt.Errorf("%d breaking changes, %d stale exceptions (see above; an intentional break needs a reviewed entry in %s)", len(failing), len(unused), exceptionsFile)
	}
	return nil
}
