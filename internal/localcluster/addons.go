package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// AddOn describes a process that runs beside the control plane (the operator; later the local
// node): started detached like the components, recorded in state.json, stopped by Stop
// before the control plane.
type AddOn struct {
	// Name names the process and its log file DIR/logs/<Name>.log.
	Name string
	// Args is the command line; Args[0] must be an absolute path.
	Args []string
	// Env are extra environment variables (NAME=value) for secrets that must not show in the
	// command line. They are not recorded in state.json nor compared: a running add-on with
	// the same Args is kept even if Env changed, so put something that identifies the secret
	// (a key ID) in Args.
	Env []string
	// Probe tells when it is ready and whether it is healthy.
	Probe Probe
	// ReadyTimeout bounds the wait for the probe (default 60 s).
	ReadyTimeout time.Duration
}

// EnsureAddOn makes sure the add-on runs and is ready: a recorded process with the same name
// and command line that is alive is kept (it returns false) once it answers its probe, which
// it is given ReadyTimeout to do — an add-on that lost the API server for a moment (a
// restarted kube-apiserver) is not ready until its watches are back, and replacing it then
// would restart the local node and every pod it runs. A process that is dead, runs another
// command line, or stays unready is stopped and a new one started and awaited (it returns
// true).
func (cp *ControlPlane) EnsureAddOn(ctx context.Context, a AddOn) (started bool, err error) {
	if a.Name == "" || len(a.Args) == 0 {
		return false, errors.New("an add-on needs a name and a command line")
	}
	if a.ReadyTimeout <= 0 {
		a.ReadyTimeout = DefaultReadyTimeout
	}
	unlock, err := lockDir(cp.Dir)
	if err != nil {
		return false, err
	}
	defer unlock()

	if old := cp.Process(a.Name); old != nil {
		if old.Alive() && slices.Equal(old.Args, a.Args) && waitReady(ctx, old, cp.PKI, a.ReadyTimeout) == nil {
			return false, nil
		}
		if err := old.Stop(cp.stopTimeout); err != nil {
			return false, fmt.Errorf("stopping the previous %s: %w", a.Name, err)
		}
		cp.remove(a.Name)
	}
	p, err := startProcess(a.Name, a.Args, a.Env, cp.logPath(a.Name), cp.Dir, 0)
	if err != nil {
		return false, err
	}
	p.Probe = a.Probe
	cp.mu.Lock()
	cp.state.Processes = append(cp.state.Processes, p)
	cp.mu.Unlock()
	if err := cp.state.save(cp.Dir); err != nil {
		return true, errors.Join(err, p.Stop(cp.stopTimeout))
	}
	if err := waitReady(ctx, p, cp.PKI, a.ReadyTimeout); err != nil {
		return true, errors.Join(err, p.Stop(cp.stopTimeout), cp.state.save(cp.Dir))
	}
	return true, nil
}

// remove drops the recorded process called name.
func (cp *ControlPlane) remove(name string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	kept := cp.state.Processes[:0]
	for _, p := range cp.state.Processes {
		if p.Name != name {
			kept = append(kept, p)
		}
	}
	cp.state.Processes = kept
}

// Health is the observed state of one recorded process.
type Health struct {
	Name string
	// PID is the recorded process ID (0 when stopped).
	PID int
	// Alive is true when the PID runs the recorded command line.
	Alive bool
	// Err is nil when the process is alive and answers its probe.
	Err error
	// Log is the process's log file.
	Log string
}

// Health checks every recorded process (in start order) once, probing each alive one.
func (cp *ControlPlane) Health(ctx context.Context) []Health {
	var out []Health
	for _, p := range cp.Processes() {
		h := Health{Name: p.Name, PID: p.PID, Alive: p.Alive(), Log: p.Log}
		switch {
		case p.PID == 0:
			h.Err = errors.New("stopped")
		case !h.Alive:
			h.Err = errors.New("not running")
		default:
			h.Err = p.Probe.Check(ctx, cp.PKI)
		}
		out = append(out, h)
	}
	return out
}

// RemoveAddOn stops the add-on called name, when one is recorded, and forgets it. It reports
// whether a running process was stopped.
func (cp *ControlPlane) RemoveAddOn(name string) (stopped bool, err error) {
	unlock, err := lockDir(cp.Dir)
	if err != nil {
		return false, err
	}
	defer unlock()
	p := cp.Process(name)
	if p == nil {
		return false, nil
	}
	wasAlive := p.Alive()
	if err := p.Stop(cp.stopTimeout); err != nil {
		return false, fmt.Errorf("stopping %s: %w", name, err)
	}
	cp.remove(name)
	if err := cp.state.save(cp.Dir); err != nil {
		return wasAlive, err
	}
	return wasAlive, nil
}
