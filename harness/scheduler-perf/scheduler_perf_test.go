// Package perf measures kube-scheduler with LayerLocality the way SIG Scheduling measures
// kube-scheduler: upstream's scheduler_perf (RunBenchmarkPerfScheduling, an in-process
// API server on a fresh etcd per workload, the scheduler started in the same process)
// with LayerLocality in the out-of-tree registry.
//
// The workloads are upstream's own, read from the module cache as they are (SchedulingBasic
// in test/integration/scheduler_perf/misc/performance-config.yaml), and layersched's
// SharedLayers and SharedLayersQueued (config/layer-locality.yaml, the same format). Each
// runs under every profile asked of config/profiles/: the benchmark writes one test case
// per (workload's test case, profile) into a temporary file, the workloads and their
// templates unchanged, the profile as the test case's schedulerConfigPath (for
// SharedLayersQueued a copy with the hold plugin at PreEnqueue: package hold). Run it through `make bench-perf`
// (harness/bench/bench_scheduler_perf.py: etcd from `make kubernetes` on PATH, the rounds, the
// ratios); by hand:
//
//	PATH=<build's bin dir>:$PATH go test -run '^$' -bench . -benchtime 1x \
//	    -perf-scheduling-label-filter= -data-items-dir /tmp/perf -workloads SharedLayers/5Nodes
package perf

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	_ "k8s.io/component-base/logs/json/register"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"sigs.k8s.io/yaml"

	"layersched.io/kube-scheduler/pkg/layerlocality"
	"layersched.io/scheduler-perf/hold"
)

// upstreamConfig is upstream's workload file, relative to k8s.io/kubernetes's module root.
const upstreamConfig = "test/integration/scheduler_perf/misc/performance-config.yaml"

// topic names the run in upstream's data items file.
const topic = "layersched"

// heldTestCases are the test cases whose measured pods wait for each other (hold): each
// of their profiles gets the hold plugin at PreEnqueue, in a derived copy of the file.
var heldTestCases = map[string]bool{"SharedLayersQueued": true}

// crdEstablishedTimeout bounds the wait for the NodeLayerInventory CRD to be served.
const crdEstablishedTimeout = time.Minute

var (
	workloads = flag.String("workloads", "SchedulingBasic/500Nodes,SchedulingBasic/5000Nodes,SharedLayersQueued/500Nodes_5000Pods,SharedLayersQueued/5000Nodes_5000Pods",
		"comma-separated TESTCASE/WORKLOAD to run, from upstream's misc/performance-config.yaml and config/layer-locality.yaml")
	profiles = flag.String("profiles", "default,default-again,no-image-locality,no-image-locality-layer-locality,layer-locality",
		"comma-separated profiles (config/profiles/NAME.yaml), each run on every workload")
	upstreamDir = flag.String("upstream-dir", "",
		"k8s.io/kubernetes's module directory (default: `go list -m` in this module)")
	crdPath = flag.String("crd", "../../install/kustomize/crd.yaml",
		"the NodeLayerInventory CRD (layersched's generated install/kustomize/crd.yaml), created before each workload")
)

func TestMain(m *testing.M) {
	if err := benchmark.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	// LayerLocality's own execution time among the metrics scheduler_perf collects.
	benchmark.PluginNames = append(benchmark.PluginNames, layerlocality.Name)
	os.Exit(m.Run())
}

func BenchmarkPerfScheduling(b *testing.B) {
	config, err := derivedConfig(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	crd, err := readCRD(*crdPath)
	if err != nil {
		b.Fatal(err)
	}
	registry := frameworkruntime.Registry{layerlocality.Name: layerlocality.New, hold.Name: hold.New}
	benchmark.RunBenchmarkPerfScheduling(b, config, topic, registry,
		benchmark.WithPrepareFn(func(tCtx ktesting.TContext) error { return createCRD(tCtx, crd) }))
}

// derivedConfig writes the chosen workloads, one test case per (test case, profile), into
// dir and returns the file's path. Relative paths are made absolute against the file each
// came from, so that upstream's templates are read where they are.
func derivedConfig(dir string) (string, error) {
	upstream := *upstreamDir
	if upstream == "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
		if err != nil {
			return "", fmt.Errorf("finding k8s.io/kubernetes's module directory with `go list -m` (or pass -upstream-dir): %w", err)
		}
		upstream = strings.TrimSpace(string(out))
	}
	sources := []string{filepath.Join(upstream, upstreamConfig), "config/layer-locality.yaml"}
	wanted := map[string]map[string]bool{}
	for _, item := range strings.Split(*workloads, ",") {
		testCase, workload, ok := strings.Cut(item, "/")
		if !ok {
			return "", fmt.Errorf("-workloads: %q is not TESTCASE/WORKLOAD", item)
		}
		if wanted[testCase] == nil {
			wanted[testCase] = map[string]bool{}
		}
		wanted[testCase][workload] = true
	}
	profileDir, err := filepath.Abs("config/profiles")
	if err != nil {
		return "", err
	}
	observedAt := time.Now().UTC().Format(time.RFC3339)
	var out []map[string]any
	found := map[string]bool{}
	for _, source := range sources {
		base, err := filepath.Abs(filepath.Dir(source))
		if err != nil {
			return "", err
		}
		data, err := os.ReadFile(source)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", source, err)
		}
		var testCases []map[string]any
		if err := yaml.Unmarshal(data, &testCases); err != nil {
			return "", fmt.Errorf("decoding %s: %w", source, err)
		}
		for _, testCase := range testCases {
			name, _ := testCase["name"].(string)
			if wanted[name] == nil {
				continue
			}
			var kept []any
			for _, w := range testCase["workloads"].([]any) {
				workload := w.(map[string]any)
				workloadName, _ := workload["name"].(string)
				if !wanted[name][workloadName] {
					continue
				}
				found[name+"/"+workloadName] = true
				if strings.HasPrefix(name, "SharedLayers") {
					workload["params"].(map[string]any)["observedAt"] = observedAt
				}
				// the label filter belongs to upstream's CI; the workloads are chosen here
				delete(workload, "labels")
				delete(workload, "threshold")
				kept = append(kept, workload)
			}
			absolutePaths(testCase, base)
			for _, profile := range strings.Split(*profiles, ",") {
				path := filepath.Join(profileDir, profile+".yaml")
				if _, err := os.Stat(path); err != nil {
					return "", fmt.Errorf("-profiles: %s: %w", profile, err)
				}
				derived := map[string]any{}
				for key, value := range testCase {
					derived[key] = value
				}
				derived["name"] = name + "_" + profile
				derived["schedulerConfigPath"] = path
				if heldTestCases[name] {
					held, err := hold.WriteProfile(path, filepath.Join(dir, profile+"-held.yaml"))
					if err != nil {
						return "", err
					}
					derived["schedulerConfigPath"] = held
				}
				derived["workloads"] = kept
				delete(derived, "labels")
				out = append(out, derived)
			}
		}
	}
	for testCase, names := range wanted {
		for workload := range names {
			if !found[testCase+"/"+workload] {
				return "", fmt.Errorf("-workloads: %s/%s is in neither %s", testCase, workload, strings.Join(sources, " nor "))
			}
		}
	}
	data, err := yaml.Marshal(out)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "performance-config.yaml")
	return path, os.WriteFile(path, data, 0o644)
}

// absolutePaths rewrites every relative template path of a test case (its own and its
// ops') against base.
func absolutePaths(testCase map[string]any, base string) {
	fix := func(object map[string]any) {
		for key, value := range object {
			path, ok := value.(string)
			if ok && strings.HasSuffix(key, "Path") && path != "" && !filepath.IsAbs(path) {
				object[key] = filepath.Join(base, path)
			}
		}
	}
	fix(testCase)
	for _, op := range testCase["workloadTemplate"].([]any) {
		fix(op.(map[string]any))
	}
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func readCRD(path string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the NodeLayerInventory CRD (-crd): %w", err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return crd, nil
}

// createCRD serves NodeLayerInventory on the workload's fresh API server, under every
// profile alike, and waits until it is established. The plugin's watch started with the
// scheduler, before this: it retries its list (client-go's backoff) until the resource
// is served.
func createCRD(tCtx ktesting.TContext, crd *unstructured.Unstructured) error {
	client := tCtx.Dynamic().Resource(crdResource)
	if _, err := client.Create(tCtx, crd.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the NodeLayerInventory CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, crdEstablishedTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := client.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			condition, _ := c.(map[string]any)
			if condition["type"] == "Established" && condition["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}
