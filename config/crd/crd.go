// Package crd embeds the generated CustomResourceDefinitions (bases/*.yaml, written by
// `make manifests`), so that `dolphin local up` installs the CRDs its own build was made with,
// from any folder.
package crd

import (
	"embed"
	"io/fs"
)

//go:embed bases/*.yaml
var bases embed.FS

// Bases returns the CRD manifests as a file system whose root holds bases/*.yaml.
func Bases() fs.FS {
	sub, err := fs.Sub(bases, "bases")
	if err != nil {
		panic(err) // "bases" is a valid path: fs.Sub cannot fail here
	}
	return sub
}
