package hold

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// activations records what the plugin activates.
type activations chan map[string]*v1.Pod

func (a activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) { a <- pods }

func pod(name, count string) *v1.Pod {
	labels := map[string]string{}
	if count != "" {
		labels[CountLabel] = count
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels}}
}

func code(status *fwk.Status) fwk.Code {
	if status == nil {
		return fwk.Success
	}
	return status.Code()
}

func TestUnlabelledPodsPass(t *testing.T) {
	h := newHold(make(activations, 1))
	if got := code(h.PreEnqueue(context.Background(), pod("init-0", ""))); got != fwk.Success {
		t.Fatalf("an unlabelled pod: %v, want Success", got)
	}
}

func TestTheLastPodOpensTheGateAndActivatesTheOthers(t *testing.T) {
	activated := make(activations, 1)
	h := newHold(activated)
	ctx := context.Background()
	for i := range 2 {
		status := h.PreEnqueue(ctx, pod(fmt.Sprintf("p%d", i), "3"))
		if code(status) != fwk.UnschedulableAndUnresolvable {
			t.Fatalf("pod %d of 3: %v, want it held", i, status)
		}
	}
	// the queue may call PreEnqueue again for a held pod: it is one pod, not two
	if code(h.PreEnqueue(ctx, pod("p1", "3"))) == fwk.Success {
		t.Fatal("a held pod seen twice opened the gate")
	}
	if got := code(h.PreEnqueue(ctx, pod("p2", "3"))); got != fwk.Success {
		t.Fatalf("the third of 3: %v, want Success", got)
	}
	select {
	case pods := <-activated:
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		if fmt.Sprint(names) != "[p0 p1]" {
			t.Fatalf("activated %v, want the two held pods", names)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held pods were never activated")
	}
	// once open, the activated pods (and any later one) pass
	if got := code(h.PreEnqueue(ctx, pod("p0", "3"))); got != fwk.Success {
		t.Fatalf("a held pod after the gate opened: %v, want Success", got)
	}
}

func TestABadCountIsRefusedSayingWhy(t *testing.T) {
	h := newHold(make(activations, 1))
	for _, value := range []string{"many", "0", "-2"} {
		status := h.PreEnqueue(context.Background(), pod("p", value))
		if code(status) != fwk.UnschedulableAndUnresolvable || status.Message() == "" {
			t.Fatalf("count %q: %v, want a refusal with a reason", value, status)
		}
	}
}

func TestNoEventRequeuesAHeldPod(t *testing.T) {
	events, err := newHold(make(activations, 1)).EventsToRegister(context.Background())
	if err != nil || len(events) != 0 {
		t.Fatalf("EventsToRegister: %v, %v; want none", events, err)
	}
}
