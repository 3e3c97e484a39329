package operator

import (
	"github.com/go-logr/logr"
)

// leaseLostError and afterStopMsg are how controller-runtime reports, at error level, the lease
// it gives up on a clean shutdown with LeaderElectionReleaseOnCancel: the leader elector's "stopped
// leading" callback sends "leader election lost" after the stop sequence began.
const (
	leaseLostError = "leader election lost"
	afterStopMsg   = "error received after stop sequence was engaged"
)

// quietShutdown wraps the manager's logger so that a clean shutdown does not log an error: the
// lease released on purpose is logged at info level instead. Every other error is kept.
func quietShutdown(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return logr.New(shutdownSink{l.GetSink()})
}

type shutdownSink struct{ logr.LogSink }

// Error implements logr.LogSink.
func (s shutdownSink) Error(err error, msg string, kv ...any) {
	if err != nil && err.Error() == leaseLostError && msg == afterStopMsg {
		s.LogSink.Info(0, "leader lease released on shutdown", kv...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

// WithValues implements logr.LogSink.
func (s shutdownSink) WithValues(kv ...any) logr.LogSink {
	return shutdownSink{s.LogSink.WithValues(kv...)}
}

// WithName implements logr.LogSink.
func (s shutdownSink) WithName(name string) logr.LogSink {
	return shutdownSink{s.LogSink.WithName(name)}
}

// WithCallDepth implements logr.CallDepthLogSink when the wrapped sink does, so reported
// callers stay right.
func (s shutdownSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return shutdownSink{cd.WithCallDepth(depth)}
	}
	return s
}
