package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Marker is the content of RestoredMarker.
type Marker struct {
	// Source says where the data came from: "backup <store and path>" or "clone from <url>".
	Source string `json:"source,omitempty"`
	// Path of the backup in its store, as given in Options.Path; empty for a clone.
	Path string `json:"path,omitempty"`
	// Store describes the store (objectstore.Store.Describe: no credentials).
	Store string `json:"store,omitempty"`
	// Name of the backup, from its manifest.
	Name string `json:"name,omitempty"`
	// GTIDPosition the restored data continues from.
	GTIDPosition string `json:"gtidPosition"`
	// RestoredAt is when the restore completed.
	RestoredAt time.Time `json:"restoredAt"`
	// Manifest of the backup.
	Manifest *backup.Manifest `json:"manifest,omitempty"`
}

// describe names what the marker says was restored, for the log.
func (mk *Marker) describe() string {
	switch {
	case mk.Source != "":
		return mk.Source
	case mk.Path != "":
		return "backup " + mk.Path
	}
	return "the data"
}

// progressEvery is how often the restore logs how much it has read.
const progressEvery = 15 * time.Second

// extract restores the backup into StagingDir and moves the result into DataDir. It returns
// the manifest and the store's description.
func (o *Options) extract(ctx context.Context) (*backup.Manifest, string, error) {
	log := o.logf()
	store, err := objectstore.New(ctx, o.Store)
	if err != nil {
		return nil, "", fmt.Errorf("restore: opening the backup store: %w", err)
	}
	where := objectstore.Locate(store, o.Path)
	m, err := backup.ReadManifest(ctx, store, o.Path)
	switch {
	case errors.Is(err, backup.ErrIncomplete) || errors.Is(err, backup.ErrCorrupt):
		return nil, where, fmt.Errorf("restore: %w: restore another backup, or check the path", err)
	case err != nil:
		return nil, where, fmt.Errorf("restore: %w: check the store's address, credentials and the backup's path", err)
	}
	if m.Flavor != "" && m.Flavor != FlavorMariaDB {
		return nil, where, fmt.Errorf("restore: backup %s is of a %s server: restoring it is %w", where, m.Flavor, ErrNotSupported)
	}
	log("restoring %s: %d bytes in %d object(s) from %s", describe(m), m.StoredBytes(), len(m.Objects), where)

	staging := filepath.Join(o.DataDir, StagingDir)
	if err := os.RemoveAll(staging); err != nil {
		return nil, where, fmt.Errorf("restore: removing %s: %w", staging, err)
	}
	total := m.StoredBytes()
	began, last := time.Now(), time.Now()
	progress := func(n int64) {
		if o.Progress != nil {
			o.Progress(n)
		}
		if time.Since(last) >= progressEvery {
			last = time.Now()
			log("read %d of %d bytes (%d%%) in %v", n, total, n*100/max(total, 1), time.Since(began).Round(time.Second))
		}
	}
	rm, err := backup.Restore(ctx, store, o.Path, backup.RestoreOptions{
		TargetDir: staging, Tool: o.BackupTool, MBStream: o.MBStream,
		UseMemory: o.UseMemory, DefaultsFile: o.DefaultsFile, Progress: progress,
	})
	if err != nil {
		if rmErr := os.RemoveAll(staging); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", staging, rmErr))
		}
		if errors.Is(err, backup.ErrCorrupt) {
			return nil, where, fmt.Errorf("%w; nothing was restored (the data directory is left empty): restore another backup", err)
		}
		return nil, where, fmt.Errorf("%w; nothing was restored (the data directory is left empty)", err)
	}
	log("extracted, verified and prepared the backup in %v", time.Since(began).Round(time.Millisecond))
	if err := moveUp(staging, o.DataDir); err != nil {
		return nil, where, fmt.Errorf("restore: moving the restored files from %s into %s: %w; the next attempt starts over", staging, o.DataDir, err)
	}
	o.keepUpgradeRecord(rm.UpgradeRecord)
	return rm, where, nil
}

// describe names a backup for the log: name, source, server version, end and position.
func describe(m *backup.Manifest) string {
	s := fmt.Sprintf("backup %q", m.Name)
	if m.Namespace != "" || m.Cluster != "" {
		s += fmt.Sprintf(" of cluster %s/%s", m.Namespace, m.Cluster)
	}
	if m.SourceInstance != "" {
		s += " taken on " + m.SourceInstance
	}
	return s + fmt.Sprintf(" (%s, completed %s, GTID position %q)", m.ServerVersion, m.EndTime.Format(time.RFC3339), m.GTIDPosition)
}

// ClearUninitialized empties dataDir of what a failed attempt at seeding it left (every
// entry but lost+found and kept copies), and returns the names removed; a missing dataDir is no error. It
// refuses a dataDir that holds InitializedMarker: that one holds an instance's data. Run it
// before initialising an uninitialised data directory some other way (the install script).
func ClearUninitialized(dataDir string) ([]string, error) {
	switch _, err := os.Stat(filepath.Join(dataDir, InitializedMarker)); {
	case err == nil:
		return nil, fmt.Errorf("%s holds %s: it is initialised, and is not cleared", dataDir, InitializedMarker)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return removeLeftovers(dataDir)
}

// removeLeftovers removes every entry of dataDir but lost+found and the kept copies
// (KeptPrefix: what a re-clone must never discard), and returns their names.
// It is called only when dataDir has neither marker: no restore into it completed and no
// server ever ran on it, so what it holds is what a failed attempt left.
func removeLeftovers(dataDir string) ([]string, error) {
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if e.Name() == lostAndFound || (strings.HasPrefix(e.Name(), KeptPrefix) && e.Type().IsRegular()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, syncDir(dataDir)
}

// moveUp renames every entry of staging into dataDir, then removes staging.
func moveUp(staging, dataDir string) error {
	ents, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	for _, e := range ents {
		to := filepath.Join(dataDir, e.Name())
		if _, err := os.Lstat(to); err == nil {
			return fmt.Errorf("the backup holds %s, which exists in the data directory already", e.Name())
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), to); err != nil {
			return err
		}
	}
	if err := os.Remove(staging); err != nil {
		return err
	}
	return syncDir(dataDir)
}

// readMarker reads RestoredMarker; the error wraps os.ErrNotExist when there is none.
func readMarker(dataDir string) (*Marker, error) {
	p := filepath.Join(dataDir, RestoredMarker)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var mk Marker
	if err := json.Unmarshal(b, &mk); err != nil {
		return nil, fmt.Errorf("%s is not a restore marker: %w", p, err)
	}
	return &mk, nil
}

// writeMarkers writes RestoredMarker and then InitializedMarker, each made durable before
// the next step.
func writeMarkers(dataDir string, mk Marker) error {
	b, err := json.MarshalIndent(mk, "", "  ")
	if err != nil {
		return err
	}
	if err := writeDurably(filepath.Join(dataDir, RestoredMarker), append(b, '\n')); err != nil {
		return err
	}
	return writeInitialized(dataDir, &mk)
}

// writeInitialized writes InitializedMarker, saying what mk says was restored.
func writeInitialized(dataDir string, mk *Marker) error {
	return writeDurably(filepath.Join(dataDir, InitializedMarker), []byte("seeded from "+mk.describe()+", see "+RestoredMarker+"\n"))
}

// writeDurably writes path through a temporary file renamed over it, synced with its
// directory.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// summarize lists names for a log line, at most 10 of them.
func summarize(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	if len(names) > 10 {
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}
