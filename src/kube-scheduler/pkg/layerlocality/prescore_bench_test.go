package layerlocality

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"layersched.io/kube-scheduler/pkg/layers"
)

// The cluster the benchmark scores: the extender benchmark's shape (harness/bench/corpus.py, and
// pkg/layers' memory measurement): 5,000 nodes of 50 images each, drawn by Zipf
// popularity from 2,000 images of 3 to 11 layers on 40 shared bases, every node with a
// fresh inventory and in the scheduler's snapshot, the plugin's default args (spread,
// quorum 2, a 30 min age bound).
const (
	benchNodes         = 5_000
	benchImagesPerNode = 50
	benchImages        = 2_000
	benchBases         = 40
	// benchPods are the pods scored in turn, their images drawn by the same popularity.
	benchPods = 64
	// benchPendingEvery: under in-flight, every this many nodes has a replica bound and
	// not started (a pending pull of a popular image).
	benchPendingEvery = 10
	// scoreWorkers is kube-scheduler's parallelism (its Score plugins run on 16
	// goroutines, parallelism's default).
	scoreWorkers = 16
)

// benchCluster is the plugin (its args: rawArgs) over such an index, the snapshot's
// NodeInfos and the pods; with the in-flight strategy, every benchPendingEvery-th node
// has a pending replica.
func benchCluster(b *testing.B, rawArgs string, pending pendingShape) (*LayerLocality, []fwk.NodeInfo, []*v1.Pod) {
	b.Helper()
	random := rand.New(rand.NewPCG(20261201, 43))
	bases := make([][]layers.Layer, benchBases)
	for i := range bases {
		for j := 0; j < 2+random.IntN(3); j++ {
			bases[i] = append(bases[i], layers.Layer{Digest: digest(fmt.Sprint("base-", i, "-", j)), SizeBytes: 1_000_000 + random.Int64N(50_000_000)})
		}
	}
	images := make([]layers.NodeImage, benchImages)
	for i := range images {
		imageLayers := append([]layers.Layer(nil), bases[random.IntN(benchBases)]...)
		for len(imageLayers) < 3+random.IntN(9) {
			imageLayers = append(imageLayers, layers.Layer{Digest: digest(fmt.Sprint("image-", i, "-", len(imageLayers))), SizeBytes: 1_000 + random.Int64N(30_000_000)})
		}
		repo := fmt.Sprintf("registry.example:5000/team%d/app%d", i%37, i)
		manifest := digest(fmt.Sprint("manifest-", i))
		images[i] = layers.NodeImage{Names: []string{repo + "@" + manifest, fmt.Sprintf("%s:v%d", repo, i%5)}, Digest: manifest, Layers: imageLayers}
	}
	zipf := rand.NewZipf(random, 1.1, 1, benchImages-1)
	args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(rawArgs), ContentType: runtime.ContentTypeJSON})
	if err != nil {
		b.Fatal(err)
	}
	index := layers.NewIndex(layers.DefaultImageQuorum)
	infos := make([]fwk.NodeInfo, benchNodes)
	for n := range infos {
		name := fmt.Sprintf("node-%05d", n)
		chosen := map[uint64]bool{}
		var held []layers.NodeImage
		for len(held) < benchImagesPerNode {
			if i := zipf.Uint64(); !chosen[i] {
				chosen[i] = true
				held = append(held, images[i])
			}
		}
		index.Upsert(&layers.NodeLayerInventory{Node: name, Images: held, ObservedAt: now})
		var replicas []*v1.Pod
		if args.Strategy == StrategyInFlight && n%pending.every == 0 {
			for r := 0; r < pending.perNode; r++ {
				replica := pod(nil, images[zipf.Uint64()].Names[1])
				id := fmt.Sprintf("%s-%d", name, r)
				replica.Name, replica.UID, replica.Spec.NodeName = "replica-"+id, types.UID("uid-"+id), name
				replicas = append(replicas, replica)
			}
		}
		info := framework.NewNodeInfo(replicas...)
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		infos[n] = info
	}
	pods := make([]*v1.Pod, benchPods)
	for i := range pods {
		pods[i] = pod(nil, images[zipf.Uint64()].Names[1])
	}
	pl := &LayerLocality{scorer: newScorer(args, index), snapshot: snapshotNodes(&snapshotHandle{lister: newSnapshotLister(infos)})}
	pl.now = func() time.Time { return now }
	if args.Strategy == StrategyInFlight {
		pl.inFlight = newInFlight(args.InFlight, pl.imageLayers)
	}
	return pl, infos, pods
}

// BenchmarkPreScoreScore is one pod's scheduling cycle as kube-scheduler runs the
// plugin: PreScore, then Score on every node (percentageOfNodesToScore 100). Per op: one
// pod. serial scores on one goroutine, workers on 16 (kube-scheduler's parallelism);
// PreScore alone; Score alone is one node's Score on a prepared pod (its allocations:
// the target is 0). Besides wall time, each reports the process's CPU time per op
// (cpu-ns/op), which a shared machine's waits for a core do not inflate.
func BenchmarkPreScoreScore(b *testing.B) {
	benchmarkCycle(b, `{}`, pendingShape{})
}

// pendingShape is which nodes have pods bound and not started under in-flight: every
// every-th node, perNode of them.
type pendingShape struct{ every, perNode int }

// BenchmarkPreScoreScoreInFlight is the same cycle under strategy: in-flight, a tenth
// of the nodes pulling a replica (their facts kept between cycles, as their NodeInfos'
// generations do not move; Score reads PreScore's scores by the NodeInfo's place: no lock,
// no allocation).
func BenchmarkPreScoreScoreInFlight(b *testing.B) {
	benchmarkCycle(b, `{"strategy": "in-flight"}`, pendingShape{every: benchPendingEvery, perNode: 1})
}

// BenchmarkPreScoreScoreInFlightBurst is the cycle in a burst: every node with 4 pods
// bound and not started (make bench-scheduler's drain of 2,000 pods on 500 nodes, at
// its end).
func BenchmarkPreScoreScoreInFlightBurst(b *testing.B) {
	benchmarkCycle(b, `{"strategy": "in-flight"}`, pendingShape{every: 1, perNode: 4})
}

func benchmarkCycle(b *testing.B, rawArgs string, pending pendingShape) {
	pl, infos, pods := benchCluster(b, rawArgs, pending)
	ctx := context.Background()
	preScore := func(b *testing.B, p *v1.Pod) fwk.CycleState {
		state := framework.NewCycleState()
		if status := pl.PreScore(ctx, state, p, infos); !status.IsSuccess() {
			b.Fatal(status.Message())
		}
		return state
	}
	b.Run("serial", func(b *testing.B) {
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			p := pods[i%len(pods)]
			state := preScore(b, p)
			for _, info := range infos {
				pl.Score(ctx, state, p, info)
			}
		}
	})
	b.Run("workers", func(b *testing.B) {
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			p := pods[i%len(pods)]
			state := preScore(b, p)
			var wg sync.WaitGroup
			for w := 0; w < scoreWorkers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := w; n < len(infos); n += scoreWorkers {
						pl.Score(ctx, state, p, infos[n])
					}
				}()
			}
			wg.Wait()
		}
	})
	b.Run("PreScore", func(b *testing.B) {
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			preScore(b, pods[i%len(pods)])
		}
	})
	b.Run("Score", func(b *testing.B) {
		p := pods[0]
		state := preScore(b, p)
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			pl.Score(ctx, state, p, infos[i%len(infos)])
		}
	})
}

// reportCPU reports allocations, and returns what reports the CPU time per op since.
func reportCPU(b *testing.B) func() {
	b.ReportAllocs()
	started := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-started)/float64(b.N), "cpu-ns/op")
	}
}
