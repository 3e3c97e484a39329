// Command charts writes the generated parts of the Helm charts under charts/ from config/
// (internal/chartgen). Run by `make manifests`.
package main

import (
	"flag"
	"log"

	"github.com/dolphin-operator/dolphin/internal/chartgen"
)

func main() {
	root := flag.String("root", ".", "the repository")
	flag.Parse()
	files, err := chartgen.Generate(*root)
	if err != nil {
		log.Fatal(err)
	}
	if err := chartgen.Write(*root, files); err != nil {
		log.Fatal(err)
	}
}
