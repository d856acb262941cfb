// Command kube-apiserver-harness runs a real Kubernetes API server for the
// collection's tests: upstream kube-apiserver (k8s.io/kubernetes as a Go module)
// in front of an embedded etcd in the same process. It is a test-only judge;
// nothing here ships in the collection.
//
// Usage: kube-apiserver-harness --etcd-dir DIR --etcd-port N -- <kube-apiserver flags>
// The --etcd-servers flag is added for the embedded etcd. Without --etcd-dir and --etcd-port no
// etcd is embedded: the flags name the etcd to use (--etcd-servers and its TLS files), as on
// Talos, where the API server stores its objects in the control planes' etcd.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func startEtcd(dir string, port int) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "harness"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port+1)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-etcd.Server.ReadyNotify():
		return etcd, nil
	case <-time.After(60 * time.Second):
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd was not ready within 60s")
	}
}

func main() {
	flags := flag.NewFlagSet("kube-apiserver-harness", flag.ExitOnError)
	dir := flags.String("etcd-dir", "", "data directory of the embedded etcd")
	port := flags.Int("etcd-port", 0, "client port of the embedded etcd (the peer port is the next one)")
	_ = flags.Parse(os.Args[1:])
	if (*dir == "") != (*port == 0) {
		fmt.Fprintln(os.Stderr, "kube-apiserver-harness: --etcd-dir and --etcd-port go together")
		os.Exit(2)
	}

	args := flags.Args()
	if *dir != "" {
		etcd, err := startEtcd(*dir, *port)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kube-apiserver-harness: embedded etcd: %v\n", err)
			os.Exit(1)
		}
		defer etcd.Close()
		args = append(args, fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", *port))
	}

	command := app.NewAPIServerCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}
