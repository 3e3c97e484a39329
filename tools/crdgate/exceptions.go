package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Exception allows one breaking change on purpose. Every field but Version and Path (empty
// for changes to a whole CRD or version) is required.
type Exception struct {
	CRD     string `json:"crd"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	Rule    Rule   `json:"rule"`
	// Reason says why the break is acceptable and what users must do (release notes).
	Reason string `json:"reason"`
	// ReviewedBy names who agreed to it.
	ReviewedBy string `json:"reviewedBy"`
}

// ExceptionFile is the reviewed list of intentional breaks.
type ExceptionFile struct {
	Exceptions []Exception `json:"exceptions"`
}

func (e Exception) key() string {
	return strings.Join([]string{e.CRD, e.Version, e.Path, string(e.Rule)}, "|")
}

// loadExceptions reads path; a missing file is an empty list.
func loadExceptions(path string) ([]Exception, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f ExceptionFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, e := range f.Exceptions {
		if e.CRD == "" || e.Rule == "" || strings.TrimSpace(e.Reason) == "" || strings.TrimSpace(e.ReviewedBy) == "" {
			return nil, fmt.Errorf("%s: exception %d needs crd, rule, reason and reviewedBy", path, i+1)
		}
	}
	return f.Exceptions, nil
}

// applyExceptions splits findings into those no exception allows and those one does, and
// returns the exceptions that allow nothing (stale: the baseline moved on, or the change was
// undone), which are errors too so that an exception never outlives its change.
func applyExceptions(findings []Finding, exceptions []Exception) (failing, excepted []Finding, unused []Exception) {
	used := map[string]bool{}
	allowed := map[string]bool{}
	for _, e := range exceptions {
		allowed[e.key()] = true
	}
	for _, f := range findings {
		if allowed[f.key()] {
			excepted = append(excepted, f)
			used[f.key()] = true
			continue
		}
		failing = append(failing, f)
	}
	for _, e := range exceptions {
		if !used[e.key()] {
			unused = append(unused, e)
		}
	}
	return failing, excepted, unused
}
