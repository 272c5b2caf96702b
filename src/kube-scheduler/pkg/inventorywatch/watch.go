// Package inventorywatch keeps a layers.Index current with the cluster's
// NodeLayerInventory objects: client-go's Reflector (the list-and-watch loop inside every
// informer: resume from the last resourceVersion, relist on 410 Gone, back off on
// failures) feeding the index directly. An informer would also keep every object in its
// own cache; this keeps none: each object is parsed and applied to the index, then
// dropped, and a full list is read page by page, so the plugin holds the compact index
// and nothing else (5,000 nodes' objects are some 200 MB of JSON).
//
// It depends on client-go, not on the scheduler framework.
package inventorywatch

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"layersched.io/kube-scheduler/pkg/layers"
)

// ListPageSize is how many objects one list request returns: a page is parsed and dropped
// before the next is fetched (the Python extender's LIST_PAGE_SIZE).
const ListPageSize = 100

// GroupVersionResource is where the objects are served.
var GroupVersionResource = schema.GroupVersionResource{
	Group: layers.Group, Version: layers.Version, Resource: layers.Resource,
}

// Hooks are told what the watch did (metrics, logs); any may be nil.
type Hooks struct {
	// Invalid: a node's object was malformed; the node now has no inventory.
	Invalid func(node string, err error)
	// Refused: the index's budget refused a node's object (or dropped a held one for a
	// smaller node's): the node now has no inventory.
	Refused func(refusal layers.Refusal)
	// Applied: a node's inventory was (re)indexed, or removed.
	Applied func()
}

// Watch lists and watches NodeLayerInventory objects into an index.
type Watch struct {
	index  *layers.Index
	hooks  Hooks
	synced int32
	// syncedCh is closed by the first full list.
	syncedCh chan struct{}
}

// Start lists then watches the objects through client into index until stop is closed.
func Start(client dynamic.Interface, index *layers.Index, hooks Hooks, stop <-chan struct{}) *Watch {
	w := &Watch{index: index, hooks: hooks, syncedCh: make(chan struct{})}
	resource := client.Resource(GroupVersionResource)
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			return listPages(resource)
		},
		WatchFunc: func(options metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(context.TODO(), options)
		},
	}
	expected := &unstructured.Unstructured{}
	expected.SetGroupVersionKind(GroupVersionResource.GroupVersion().WithKind(layers.Kind))
	reflector := cache.NewNamedReflector("LayerLocality NodeLayerInventory", pagedListWatch{lw}, expected, &store{w}, 0)
	go reflector.Run(stop)
	return w
}

// WaitForSync waits until the first full list is indexed, at most timeout; false if it
// was not by then (the API is unreachable, or the CRD is not installed): the plugin
// then scores as the inventory fills.
func (w *Watch) WaitForSync(timeout time.Duration) bool {
	select {
	case <-w.syncedCh:
		return true
	case <-time.After(timeout):
		return false
	}
}

// HasSynced says whether a full list was indexed.
func (w *Watch) HasSynced() bool {
	return atomic.LoadInt32(&w.synced) == 1
}

// pagedListWatch declines the WatchList semantics (client-go 1.35+ streams the initial
// state through a watch by default): the Reflector would then gather every object, raw,
// in a temporary store before handing them over at once, where listPages parses and
// drops each page and keeps the parsed inventories only.
type pagedListWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells client-go's Reflector to list, not stream.
func (pagedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// listPages reads every object, ListPageSize at a time, parsing each page before the
// next is fetched; the result holds parsed inventories only.
func listPages(resource dynamic.NamespaceableResourceInterface) (runtime.Object, error) {
	result := &parsedList{}
	options := metav1.ListOptions{Limit: ListPageSize}
	for {
		page, err := resource.List(context.TODO(), options)
		if err != nil {
			return nil, err
		}
		if result.ResourceVersion == "" {
			result.ResourceVersion = page.GetResourceVersion()
		}
		for i := range page.Items {
			result.Items = append(result.Items, parse(&page.Items[i]))
		}
		options.Continue = page.GetContinue()
		if options.Continue == "" {
			return result, nil
		}
	}
}

func parse(object *unstructured.Unstructured) *parsed {
	item := &parsed{name: object.GetName()}
	data, err := object.MarshalJSON()
	if err == nil {
		item.inventory, err = layers.DecodeNodeLayerInventory(data)
	}
	item.err = err
	return item
}

// store applies what the Reflector reads to the index; it keeps no object (List and Get
// answer nothing: nothing but the Reflector calls them, and it does not).
type store struct{ w *Watch }

func (s *store) apply(item *parsed) {
	if item.err != nil {
		klog.Warningf("LayerLocality: ignoring the layers published for node %s: %v", item.name, item.err)
		s.w.index.Remove(item.name)
		if s.w.hooks.Invalid != nil {
			s.w.hooks.Invalid(item.name, item.err)
		}
	} else {
		s.refused(s.w.index.Upsert(item.inventory))
	}
	if s.w.hooks.Applied != nil {
		s.w.hooks.Applied()
	}
}

func (s *store) refused(refusals []layers.Refusal) {
	for _, refusal := range refusals {
		klog.Warningf("LayerLocality: %v", refusal)
		if s.w.hooks.Refused != nil {
			s.w.hooks.Refused(refusal)
		}
	}
}

func (s *store) Add(obj interface{}) error {
	object, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("LayerLocality: a watch event of type %T, expected an object", obj)
	}
	s.apply(parse(object))
	return nil
}

func (s *store) Update(obj interface{}) error {
	return s.Add(obj)
}

func (s *store) Delete(obj interface{}) error {
	object, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("LayerLocality: a watch event of type %T, expected an object", obj)
	}
	s.w.index.Remove(object.GetName())
	if s.w.hooks.Applied != nil {
		s.w.hooks.Applied()
	}
	return nil
}

func (s *store) Replace(items []interface{}, _ string) error {
	inventories := make([]*layers.NodeLayerInventory, 0, len(items))
	for _, obj := range items {
		item, ok := obj.(*parsed)
		if !ok {
			return fmt.Errorf("LayerLocality: a listed item of type %T, expected a parsed inventory", obj)
		}
		if item.err != nil {
			klog.Warningf("LayerLocality: ignoring the layers published for node %s: %v", item.name, item.err)
			if s.w.hooks.Invalid != nil {
				s.w.hooks.Invalid(item.name, item.err)
			}
			continue
		}
		inventories = append(inventories, item.inventory)
	}
	s.refused(s.w.index.Replace(inventories))
	if atomic.CompareAndSwapInt32(&s.w.synced, 0, 1) {
		close(s.w.syncedCh)
	}
	klog.V(2).Infof("LayerLocality: listed %d NodeLayerInventory objects, %d indexed", len(items), len(inventories))
	if s.w.hooks.Applied != nil {
		s.w.hooks.Applied()
	}
	return nil
}

func (s *store) Resync() error                              { return nil }
func (s *store) List() []interface{}                        { return nil }
func (s *store) ListKeys() []string                         { return nil }
func (s *store) Get(interface{}) (interface{}, bool, error) { return nil, false, nil }
func (s *store) GetByKey(string) (interface{}, bool, error) { return nil, false, nil }

// parsed is one listed object, parsed (or why it could not be), as the Reflector's list
// item.
type parsed struct {
	name      string
	inventory *layers.NodeLayerInventory
	err       error
}

func (p *parsed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (p *parsed) DeepCopyObject() runtime.Object {
	copied := *p
	return &copied
}

// parsedList is a full list as the Reflector needs it: items and the list's
// resourceVersion to watch from.
type parsedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *parsedList) DeepCopyObject() runtime.Object {
	copied := *l
	copied.Items = append([]runtime.Object(nil), l.Items...)
	return &copied
}
