package nodesim

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// podsByNode indexes pods by spec.nodeName.
const podsByNode = "nodeName"

// podWorkers is how many pods are handled at once.
const podWorkers = 2

// podKubelet is the part of the simulated kubelets that runs pods: a pod bound to a node whose kubelet is
// up is marked Running, and a pod being deleted there is finished (deleted for good), as a kubelet does
// once its containers have stopped. On a node whose kubelet is down nothing happens to its pods: that is
// what PodGC and the out-of-service taint are for.
type podKubelet struct {
	s        *Simulator
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

func newPodKubelet(s *Simulator) (*podKubelet, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	p := &podKubelet{
		s:        s,
		factory:  factory,
		informer: inf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodesim-pods"}),
	}
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if err := inf.AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{pod.Spec.NodeName}, nil
	}}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !s.simulated(pod.Spec.NodeName) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			p.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	return p, nil
}

// stripManagedFields is the pod informer's transform: managed fields are most of a pod's bytes.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// run works the queue until ctx is done.
func (p *podKubelet) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	done := make(chan struct{})
	for range podWorkers {
		go func() {
			defer func() { done <- struct{}{} }()
			for p.next(ctx) {
			}
		}()
	}
	for range podWorkers {
		<-done
	}
}

// next handles one pod; false when the queue is shut down.
func (p *podKubelet) next(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if err := p.sync(ctx, key); err != nil {
		p.s.stats.errors.Add(1)
		p.s.log.V(1).Info("Pod sync failed, retrying", "pod", key, "error", err.Error())
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// nodeUp looks at every pod of a node whose kubelet has just come up.
func (p *podKubelet) nodeUp(node string) {
	objs, err := p.informer.GetIndexer().ByIndex(podsByNode, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			p.queue.Add(key)
		}
	}
}

// sync acts on one pod as its node's kubelet would.
func (p *podKubelet) sync(ctx context.Context, key string) error {
	obj, exists, err := p.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	up, index := p.s.heartbeating(pod.Spec.NodeName)
	if !up {
		return nil
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return p.s.finishDeletion(ctx, pod)
	case pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "":
		_, err := p.s.markRunning(ctx, pod, index)
		return err
	}
	return nil
}

// finishDeletion deletes a terminating pod for good: its containers have stopped.
func (s *Simulator) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := s.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod of that name
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	s.stats.podsDeleted.Add(1)
	return nil
}

// markRunning reports a pod's containers started: phase Running, Ready, with IPs.
func (s *Simulator) markRunning(ctx context.Context, pod *corev1.Pod, index int) (*corev1.Pod, error) {
	now := metav1.NewTime(s.clock.Now())
	pod = pod.DeepCopy()
	ip := hostIP(index)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP, pod.Status.HostIPs = ip, []corev1.HostIP{{IP: ip}}
	n := s.podIPs.Add(1)
	podIP := fmt.Sprintf("10.%d.%d.%d", 128+(n>>16)&127, (n>>8)&255, n&255)
	pod.Status.PodIP, pod.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = nil
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     c.Image,
			ContainerID: fmt.Sprintf("nodesim://%s-%s", pod.UID, c.Name),
			Ready:       true,
			Started:     ptr.To(true),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	got, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("marking pod %s/%s running: %w", pod.Namespace, pod.Name, err)
	}
	s.stats.podsStarted.Add(1)
	return got, nil
}

// RunPod creates a pod bound to a simulated node (pod.Spec.NodeName) and, when that node's kubelet is
// up, marks it Running at once and returns it so. On a node whose kubelet is down the pod stays Pending
// until it comes up. There is no scheduler in the world: NodeName must be set.
func (s *Simulator) RunPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	if pod.Spec.NodeName == "" || !s.simulated(pod.Spec.NodeName) {
		return nil, fmt.Errorf("pod %s/%s: spec.nodeName %q: %w", pod.Namespace, pod.Name, pod.Spec.NodeName, ErrUnknownNode)
	}
	created, err := s.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	up, index := s.heartbeating(pod.Spec.NodeName)
	if !up {
		return created, nil
	}
	running, err := s.markRunning(ctx, created, index)
	if apierrors.IsConflict(err) {
		// The pod kubelet got there first.
		return s.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	return running, err
}

// PodOption changes a pod that NewPod builds.
type PodOption func(*corev1.Pod)

// WithLabels adds labels to the pod.
func WithLabels(labels map[string]string) PodOption {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		maps.Copy(p.Labels, labels)
	}
}

// WithClaim mounts a PersistentVolumeClaim at /data: a stateful pod. Nothing attaches a volume (there are
// no volume plugins in the world); the claim is there for what watches pods and their claims.
func WithClaim(claimName string) PodOption {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
		}})
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts,
				corev1.VolumeMount{Name: "data", MountPath: "/data"})
		}
	}
}

// NewPod builds a one-container pod bound to node, for RunPod.
func NewPod(namespace, name, node string, opts ...PodOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.k8s.io/pause:3.10",
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}
