//go:build tools

// Package tools pins MOCO's controller so that `go build` in this module
// builds it at the version in go.mod.
package tools

import _ "github.com/cybozu-go/moco/cmd/moco-controller"
