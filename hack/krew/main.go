// Command krew builds kubectl-dolphin's release archives and its krew manifest
// (internal/pluginrelease): make plugin-release VERSION=v0.1.0.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/dolphin-operator/dolphin/internal/pluginrelease"
)

func main() {
	version := flag.String("version", "", "the release version, vX.Y.Z (required)")
	out := flag.String("out", "dist", "folder for the archives and dolphin.yaml")
	urlBase := flag.String("url-base", "", "where the archives will be downloadable (default: the GitHub release of the version)")
	flag.Parse()
	if *version == "" {
		log.Fatal("--version is required")
	}
	if *urlBase == "" {
		*urlBase = "https://github.com/dolphin-operator/dolphin/releases/download/" + *version
	}
	archives, err := pluginrelease.BuildArchives(context.Background(), ".", *version, *out, pluginrelease.Platforms)
	if err != nil {
		log.Fatal(err)
	}
	m := pluginrelease.Manifest(*version, *urlBase, archives)
	if err := pluginrelease.Validate(m); err != nil {
		log.Fatalf("the krew manifest is invalid: %v", err)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		log.Fatal(err)
	}
	file := filepath.Join(*out, "dolphin.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s and %d archives\n", file, len(archives))
}
