package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

type options struct {
	dataDir        string
	kubeconfig     string
	exitOnStdinEOF bool
	removeOnExit   bool
	fsync          bool
	startTimeout   time.Duration
	crds           crdPaths
}

func parseOptions(args []string) (*options, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.dataDir, "data-dir", "", "directory for etcd data, credentials and logs (kept across restarts)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default DATA_DIR/kubeconfig)")
	fs.BoolVar(&o.exitOnStdinEOF, "exit-on-stdin-eof", false, "shut down when standard input closes (the parent died)")
	fs.BoolVar(&o.removeOnExit, "remove-data-dir-on-exit", false, "delete the data dir after shutting down (throw-away test instances)")
	fs.BoolVar(&o.fsync, "fsync", false, "let etcd fsync its writes (off by default: tests want speed, and a killed process still leaves its writes in the page cache)")
	fs.DurationVar(&o.startTimeout, "start-timeout", 3*time.Minute, "how long start-up may take before giving up")
	fs.Var(&o.crds, "crd", "a CRD file, or a directory of *.yaml CRD files, to install before the controllers start (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.dataDir == "" {
		return nil, errors.New("--data-dir is required")
	}
	var err error
	if o.dataDir, err = filepath.Abs(o.dataDir); err != nil {
		return nil, err
	}
	if o.kubeconfig == "" {
		o.kubeconfig = filepath.Join(o.dataDir, "kubeconfig")
	}
	o.kubeconfig, err = filepath.Abs(o.kubeconfig)
	return o, err
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "inpool-testenv: "+format+"\n", args...)
}

func runSupervisor(args []string) int {
	o, err := parseOptions(args)
	if err != nil {
		logf("%v", err)
		return 2
	}
	sv := &supervisor{opts: o, exited: make(chan childExit, 4)}
	code := sv.run()
	sv.shutdown()
	if o.removeOnExit {
		if err := os.RemoveAll(o.dataDir); err != nil {
			logf("removing %s: %v", o.dataDir, err)
		}
	}
	return code
}

type childExit struct {
	name string
	err  error
}

type supervisor struct {
	opts     *options
	etcd     *embed.Etcd
	children []*child
	exited   chan childExit
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (sv *supervisor) run() int {
	o := sv.opts
	started := time.Now()
	for _, dir := range []string{o.dataDir, sv.logDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			logf("%v", err)
			return 1
		}
	}
	creds, err := loadOrCreatePKI(filepath.Join(o.dataDir, "pki"))
	if err != nil {
		logf("%v", err)
		return 1
	}
	ports, err := loadOrPickPorts(filepath.Join(o.dataDir, "ports.json"))
	if err != nil {
		logf("choosing ports: %v", err)
		return 1
	}
	if err := sv.startEtcd(ports); err != nil {
		logf("starting etcd: %v", err)
		return 1
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", ports.APIServer)
	if err := sv.startChild("apiserver", apiserverArgs(o.dataDir, creds, ports)); err != nil {
		logf("%v", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout)
	defer cancel()
	ctx, stop := sv.cancelOnChildExit(ctx)
	defer stop()
	if err := waitAPIServerReady(ctx, server, creds); err != nil {
		logf("kube-apiserver did not become ready: %v (log: %s)", err, sv.logPath("apiserver"))
		return 1
	}
	if err := writeKubeconfig(o.kubeconfig, server, creds); err != nil {
		logf("writing kubeconfig: %v", err)
		return 1
	}
	restConfig, err := adminRESTConfig(server, creds)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := installCRDs(ctx, restConfig, o.crds); err != nil {
		logf("%v", err)
		return 1
	}
	if err := sv.startChild("controller-manager", controllerManagerArgs(o.kubeconfig)); err != nil {
		logf("%v", err)
		return 1
	}
	if err := probeControllers(ctx, restConfig); err != nil {
		logf("controllers did not become ready: %v (log: %s)", err, sv.logPath("controller-manager"))
		return 1
	}
	stop()
	fmt.Printf("inpool-testenv ready: kubeconfig=%s server=%s startup=%.1fs\n", o.kubeconfig, server, time.Since(started).Seconds())
	return sv.waitForStop()
}

// cancelOnChildExit cancels ctx when a child dies during start-up, so that waits fail fast.
func (sv *supervisor) cancelOnChildExit(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		select {
		case e := <-sv.exited:
			sv.exited <- e // waitForStop must see it too
			cancel(fmt.Errorf("%s exited: %v", e.name, e.err))
		case <-done:
		}
	}()
	var once bool
	return ctx, func() {
		if !once {
			once = true
			close(done)
		}
	}
}

func (sv *supervisor) waitForStop() int {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	stdinClosed := make(chan struct{})
	if sv.opts.exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stdinClosed)
		}()
	}
	select {
	case s := <-signals:
		logf("received %v, shutting down", s)
		return 0
	case <-stdinClosed:
		logf("standard input closed, shutting down")
		return 0
	case e := <-sv.exited:
		logf("%s exited unexpectedly: %v (log: %s)", e.name, e.err, sv.logPath(e.name))
		return 1
	case err := <-sv.etcd.Err():
		logf("etcd failed: %v", err)
		return 1
	}
}

// shutdown stops the components in reverse dependency order: controllers, API server, etcd.
func (sv *supervisor) shutdown() {
	for i := len(sv.children) - 1; i >= 0; i-- {
		sv.children[i].stop(30 * time.Second)
	}
	if sv.etcd != nil {
		sv.etcd.Close()
	}
}

func (sv *supervisor) logDir() string { return filepath.Join(sv.opts.dataDir, "logs") }

func (sv *supervisor) logPath(name string) string {
	return filepath.Join(sv.logDir(), name+".log")
}

func (sv *supervisor) startChild(name string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(sv.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a terminal's Ctrl-C reaches only the supervisor, which stops the
	// children in order. Pdeathsig: the children die with the supervisor, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	sv.children = append(sv.children, c)
	go func() {
		err := cmd.Wait()
		logFile.Close()
		close(c.done)
		select {
		case sv.exited <- childExit{name: name, err: err}:
		default:
		}
	}()
	return nil
}

func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		logf("%s did not stop within %v, killing it", c.name, grace)
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (sv *supervisor) startEtcd(p *portSet) error {
	cfg := embed.NewConfig()
	cfg.Name = "inpool-testenv"
	cfg.Dir = filepath.Join(sv.opts.dataDir, "etcd")
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p.EtcdClient))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p.EtcdPeer))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{sv.logPath("etcd")}
	cfg.UnsafeNoFsync = !sv.opts.fsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	sv.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case <-time.After(sv.opts.startTimeout):
		return fmt.Errorf("not ready after %v (log: %s)", sv.opts.startTimeout, sv.logPath("etcd"))
	}
}

func apiserverArgs(dataDir string, creds *pki, p *portSet) []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(p.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.APIServer),
		"--cert-dir=" + filepath.Join(dataDir, "apiserver"),
		"--tls-cert-file=" + creds.servingCrt,
		"--tls-private-key-file=" + creds.servingKey,
		"--client-ca-file=" + creds.caCert,
		"--token-auth-file=" + creds.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + creds.saPub,
		"--service-account-signing-key-file=" + creds.saKey,
		// Only an allocation range for Service objects; no traffic goes there.
		"--service-cluster-ip-range=10.96.0.0/24",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=false",
		"--profiling=false",
	}
}

func controllerManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=garbage-collector-controller,namespace-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
	}
}

// portSet is remembered in the data dir so that a restart serves on the same address and old
// kubeconfigs keep working; a port that has been taken meanwhile is replaced.
type portSet struct {
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	APIServer  int `json:"apiServer"`
}

func loadOrPickPorts(path string) (*portSet, error) {
	p := &portSet{}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, p)
	}
	for _, port := range []*int{&p.EtcdClient, &p.EtcdPeer, &p.APIServer} {
		if *port != 0 && portFree(*port) {
			continue
		}
		free, err := pickFreePort()
		if err != nil {
			return nil, err
		}
		*port = free
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return p, os.WriteFile(path, data, 0o600)
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func pickFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
