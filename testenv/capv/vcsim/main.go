// vcsim serves a govmomi vCenter simulator (the VPX model: datacenter DC0, cluster DC0_C0, host
// DC0_H0, datastore LocalDS_0, network "VM Network", template VMs DC0_H0_VM0 …) on 127.0.0.1 for
// CAPV, and plays the guest operating system of every VM CAPV powers on.
//
// It prints one line, "vcsim ready: url=… host=… username=… password=… thumbprint=…", then serves
// until SIGTERM or SIGINT (the tests' launcher sends SIGTERM when the test binary exits).
//
// The guest: a real VM's cloud-init reads the network configuration CAPV writes into the VM's
// extraConfig (guestinfo.metadata, netplan v2), configures its NIC, and VMware Tools reports the
// address back as guest.ipAddress. The simulator does none of that, so a CAPV machine would wait
// for an IP address forever. Every 250 ms this program reads each powered-on VM's metadata and
// reports the first address it configures as the guest's IP (vcsim's SET.guest.ipAddress), and
// prints "guest NAME: addresses=[…] gateway4=… gateway6=…" for every change, so the test can see
// what CAPV wrote into the machine.
package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	_ "github.com/vmware/govmomi/vapi/cluster/simulator" // cluster modules REST endpoints (CAPV uses them)
	_ "github.com/vmware/govmomi/vapi/simulator"         // vAPI REST endpoints: sessions, tagging
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	"sigs.k8s.io/yaml"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "host:port to serve on")
	user := flag.String("username", "user", "the one username the simulator accepts")
	pass := flag.String("password", "pass", "its password")
	flag.Parse()

	model := simulator.VPX()
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*user, *pass)}
	model.Service.TLS = new(tls.Config) // the simulator's built-in self-signed certificate
	model.Service.RegisterEndpoints = true
	server := model.Service.NewServer()
	thumbprint := ""
	if info := server.CertificateInfo(); info != nil {
		thumbprint = info.ThumbprintSHA1
	}
	fmt.Printf("vcsim ready: url=%s host=%s username=%s password=%s thumbprint=%s\n",
		server.URL.String(), server.URL.Host, *user, *pass, thumbprint)

	ctx, stop := context.WithCancel(context.Background())
	go playGuests(ctx, server.URL)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	stop()
	server.Close()
	model.Remove()
}

// The part of cloud-init's network configuration (netplan v2) that CAPV writes and a guest reads.
type metadata struct {
	Network struct {
		Ethernets map[string]struct {
			Addresses []string `json:"addresses"`
			Gateway4  string   `json:"gateway4"`
			Gateway6  string   `json:"gateway6"`
		} `json:"ethernets"`
	} `json:"network"`
}

func playGuests(ctx context.Context, u *url.URL) {
	client, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		log.Fatalf("guest: logging in to the simulator: %v", err)
	}
	reported := map[string]string{}
	for ctx.Err() == nil {
		if err := reportGuestAddresses(ctx, client, reported); err != nil && ctx.Err() == nil {
			log.Printf("guest: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// reportGuestAddresses configures every powered-on VM's guest from its metadata once.
func reportGuestAddresses(ctx context.Context, client *govmomi.Client, reported map[string]string) error {
	manager := view.NewManager(client.Client)
	vms, err := manager.CreateContainerView(ctx, client.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return err
	}
	defer func() { _ = vms.Destroy(context.Background()) }()
	var found []mo.VirtualMachine
	if err := vms.Retrieve(ctx, []string{"VirtualMachine"}, []string{"name", "config.extraConfig", "runtime.powerState"}, &found); err != nil {
		return err
	}
	for _, vm := range found {
		if vm.Config == nil || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			continue
		}
		encoded, encoding := "", ""
		for _, option := range vm.Config.ExtraConfig {
			value := option.GetOptionValue()
			switch value.Key {
			case "guestinfo.metadata":
				encoded = fmt.Sprint(value.Value)
			case "guestinfo.metadata.encoding":
				encoding = fmt.Sprint(value.Value)
			}
		}
		if encoded == "" {
			continue
		}
		raw := []byte(encoded)
		if encoding == "base64" {
			if raw, err = base64.StdEncoding.DecodeString(encoded); err != nil {
				log.Printf("guest %s: guestinfo.metadata is not base64: %v", vm.Name, err)
				continue
			}
		}
		var config metadata
		if err := yaml.Unmarshal(raw, &config); err != nil {
			log.Printf("guest %s: guestinfo.metadata is not YAML: %v", vm.Name, err)
			continue
		}
		names := make([]string, 0, len(config.Network.Ethernets))
		for name := range config.Network.Ethernets {
			names = append(names, name)
		}
		sort.Strings(names)
		var addresses []string
		var gateway4, gateway6 string
		for _, name := range names {
			ethernet := config.Network.Ethernets[name]
			addresses = append(addresses, ethernet.Addresses...)
			if gateway4 == "" {
				gateway4 = ethernet.Gateway4
			}
			if gateway6 == "" {
				gateway6 = ethernet.Gateway6
			}
		}
		summary := fmt.Sprintf("addresses=[%s] gateway4=%s gateway6=%s", strings.Join(addresses, " "), gateway4, gateway6)
		if len(addresses) == 0 || reported[vm.Self.Value] == summary {
			continue
		}
		// The simulator reports one guest address per VM: the first one configured.
		guestIP, _, _ := strings.Cut(addresses[0], "/")
		task, err := object.NewVirtualMachine(client.Client, vm.Self).Reconfigure(ctx, types.VirtualMachineConfigSpec{
			ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: "SET.guest.ipAddress", Value: guestIP}},
		})
		if err == nil {
			err = task.Wait(ctx)
		}
		if err != nil {
			log.Printf("guest %s: reporting %s: %v", vm.Name, guestIP, err)
			continue
		}
		reported[vm.Self.Value] = summary
		fmt.Printf("guest %s: %s\n", vm.Name, summary)
	}
	return nil
}
