package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func waitAPIServerReady(ctx context.Context, server string, creds *pki) error {
	caPEM, err := os.ReadFile(creds.caCert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	lastErr := fmt.Errorf("no answer yet")
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+creds.adminToken)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			lastErr = fmt.Errorf("/readyz answered %d: %.300s", resp.StatusCode, body)
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func writeKubeconfig(path, server string, creds *pki) error {
	caPEM, err := os.ReadFile(creds.caCert)
	if err != nil {
		return err
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: inpool-testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: inpool-testenv
  context:
    cluster: inpool-testenv
    user: %s
current-context: inpool-testenv
`, server, base64.StdEncoding.EncodeToString(caPEM), adminUser, creds.adminToken, adminUser)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func adminRESTConfig(server string, creds *pki) (*rest.Config, error) {
	caPEM, err := os.ReadFile(creds.caCert)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            server,
		BearerToken:     creds.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
	}, nil
}

// probeControllers proves that the garbage collector and the namespace controller are working
// before the control plane is announced as ready: tests rely on both.
func probeControllers(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := fmt.Sprintf("inpool-testenv-probe-%d", time.Now().UnixNano())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	maps := cs.CoreV1().ConfigMaps(ns)
	owner, err := maps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:            "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}
	if _, err := maps.Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := maps.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := waitGone(ctx, "garbage collection of a dependent", func() error {
		_, err := maps.Get(ctx, dependent.Name, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return waitGone(ctx, "namespace deletion", func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
}

func waitGone(ctx context.Context, what string, get func() error) error {
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
