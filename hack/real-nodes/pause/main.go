// Command pause is the sandbox ("pause") container of the real-node tier's containerd instances
// (hack/real-nodes/): the process that holds a pod's namespaces. It waits for SIGTERM or SIGINT and then
// exits 0; as PID 1 of a pod that shares its process namespace it also reaps the children re-parented
// to it. hack/real-nodes/build.sh builds it static and imports it, alone in its root filesystem, as an
// image; no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every child that has exited, without blocking.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
