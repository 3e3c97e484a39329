package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Ports are the 127.0.0.1 ports of the control plane. A zero field in Options.Ports means
// "reuse the one in state.json if it is free, else pick a free one".
type Ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
}

// list returns pointers to every port, in a fixed order.
func (p *Ports) list() []*int {
	return []*int{&p.EtcdClient, &p.EtcdPeer, &p.APIServer, &p.ControllerManager, &p.Scheduler}
}

// state is what DIR/state.json records: enough for `status` and `down` (in another process)
// to find and check every process, and for `up` to reuse ports and binaries.
type state struct {
	BinDir string `json:"binDir"`
	Ports  Ports  `json:"ports"`
	// AdvertiseAddress is Options.AdvertiseAddress of the running control plane.
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	// ServiceCIDR is Options.ServiceCIDR of the running control plane ("" for the default).
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Processes in start order; Stop goes through them in reverse.
	Processes []*Process `json:"processes"`
}

// stateFile is the path of state.json in dir.
func stateFile(dir string) string { return filepath.Join(dir, "state.json") }

// loadState reads DIR/state.json. A missing file yields an empty state and fs.ErrNotExist.
func loadState(dir string) (*state, error) {
	data, err := os.ReadFile(stateFile(dir))
	if err != nil {
		return &state{}, fmt.Errorf("reading state: %w", err)
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return &state{}, fmt.Errorf("parsing %s: %w", stateFile(dir), err)
	}
	return &s, nil
}

// save writes state.json atomically (write to a temporary file, then rename).
func (s *state) save(dir string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	tmp := stateFile(dir) + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, stateFile(dir)); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}

// lockDir takes an exclusive lock on DIR/.lock so that two `dolphin local` commands never
// start or stop the same cluster at once. The returned function releases it.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// isNotExist reports whether err says that state.json does not exist.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
