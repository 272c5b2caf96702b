//go:build linux

// Command pause is the process of every pod sandbox on the testbed's nodes: it holds the
// pod's namespaces open and does nothing else. Our own, in Go, so that the testbed's
// sandbox image is built from this module like every other binary (no C source of any
// other project is compiled). As a pod's PID 1 with a shared process namespace it reaps
// the orphans re-parented to it; SIGINT or SIGTERM ends it with status 0, as the
// kubelet expects of a sandbox it stops.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (layersched)")
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
