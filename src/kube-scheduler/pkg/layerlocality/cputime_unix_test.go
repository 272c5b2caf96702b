//go:build unix

package layerlocality

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system, every thread): on a
// shared machine it counts the work, where wall time counts the waits for a core too.
func processCPU() time.Duration {
	var usage syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &usage) != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
