package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchOutEnv names the file a benchmark writes its figures to (the Makefile's bench targets
// set it and print it).
const BenchOutEnv = "DOLPHIN_BENCH_OUT"

// BenchReport collects a benchmark's figure lines; at the end of the test (t.Cleanup) it
// logs them, or writes them to $DOLPHIN_BENCH_OUT when set, with Summary last when the test
// passed.
type BenchReport struct {
	lines []string
	// Summary is the one line the benchmark ends with; left out when the test failed.
	Summary string
}

// NewBenchReport returns a report written when t ends.
func NewBenchReport(t *testing.T) *BenchReport {
	r := &BenchReport{}
	t.Cleanup(func() {
		lines := r.lines
		if r.Summary != "" && !t.Failed() {
			lines = append(lines, r.Summary)
		}
		text := strings.Join(lines, "\n")
		if text != "" {
			text += "\n"
		}
		out := os.Getenv(BenchOutEnv)
		if out == "" {
			t.Log("\n" + text)
			return
		}
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			t.Errorf("writing %s: %v", out, err)
		}
	})
	return r
}

// Add appends a figure line.
func (r *BenchReport) Add(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

// MBps is n bytes over d in MB (10^6 bytes) per second; 0 for no time.
func MBps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

// IncreasingCounts parses a benchmark's list of cumulative counts, such as "10,100,300":
// positive integers, each larger than the one before.
func IncreasingCounts(spec string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(counts) > 0 && n <= counts[len(counts)-1]) {
			return nil, fmt.Errorf("%q: want increasing positive counts such as 1,5,10", spec)
		}
		counts = append(counts, n)
	}
	return counts, nil
}
