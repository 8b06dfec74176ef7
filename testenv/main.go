// Command inpool-testenv runs a small but real Kubernetes control plane on loopback for inpool's
// tests and local demo: embedded etcd, kube-apiserver, and the garbage-collector and namespace
// controllers of kube-controller-manager.
//
//	inpool-testenv run --data-dir DIR --kubeconfig FILE [--exit-on-stdin-eof]
//
// The supervisor (`run`) hosts etcd in-process and re-executes itself as `apiserver` and
// `controller-manager` children: both components install process-wide signal handlers and flag
// sets, so they cannot share one process. Everything listens on 127.0.0.1 only.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "run":
		os.Exit(runSupervisor(os.Args[2:]))
	case "apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(os.Args[2:])
		os.Exit(cli.Run(cmd))
	case "controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(os.Args[2:])
		os.Exit(cli.Run(cmd))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: inpool-testenv run --data-dir DIR --kubeconfig FILE [--exit-on-stdin-eof]")
	os.Exit(2)
}
