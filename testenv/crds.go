package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// crdPaths collects repeated --crd flags (files or directories of *.yaml).
type crdPaths []string

func (c *crdPaths) String() string     { return strings.Join(*c, ",") }
func (c *crdPaths) Set(v string) error { *c = append(*c, v); return nil }

// installCRDs applies the given CRDs and waits until they are established. It runs before the
// controller manager starts: the garbage collector discovers resource types at start-up and then
// only every 30 seconds, so CRDs installed later would not be garbage-collected for a while.
func installCRDs(ctx context.Context, cfg *rest.Config, paths []string) error {
	files, err := expandYAMLFiles(paths)
	if err != nil {
		return err
	}
	client, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	force := true
	var names []string
	for _, file := range files {
		docs, err := readYAMLDocuments(file)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			body, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			opts := metav1.PatchOptions{FieldManager: "inpool-testenv", Force: &force}
			if _, err := crds.Patch(ctx, crd.Name, types.ApplyPatchType, body, opts); err != nil {
				return fmt.Errorf("installing CRD %s from %s: %w", crd.Name, file, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		if err := waitEstablished(ctx, crds, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, crds interface {
	Get(context.Context, string, metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}, name string) error {
	for {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established: %w", name, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func expandYAMLFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(p, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	return files, nil
}

func readYAMLDocuments(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(strings.TrimSpace(string(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}
