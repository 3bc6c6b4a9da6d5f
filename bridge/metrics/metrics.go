// Package metrics defines the bridge's and the dispatcher's Prometheus
// metrics in one place, so names and labels stay stable and documented.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// Bridge counts what the watcher and the publisher do.
type Bridge struct {
	// WatchEvents by kind (pod, namespace) and op (add, update, delete, resync).
	WatchEvents *prometheus.CounterVec
	// PodsDecoded counts pod objects the watches and lists received from
	// the API server and decoded: what watching costs. Those the scope of
	// their namespace does not admit count too (anyone may label a pod
	// istio-aux.dev/watched=true, and the cluster-wide watch brings it):
	// decoded, then dropped before they are packed, cached or queued.
	PodsDecoded prometheus.Counter
	// WatchedNamespaces is the number of namespaces in scope, by scope
	// (all, labelled): those whose pods the watcher serves.
	WatchedNamespaces *prometheus.GaugeVec
	// StrayWatches is the number of namespaces whose pods not labelled
	// istio-aux.dev/watched=true are watched on their own, until none is
	// left.
	StrayWatches prometheus.Gauge
	// Sweeps counts the searches for opted-in pods not labelled
	// istio-aux.dev/watched=true (the selector istio-aux.dev/watched!=true:
	// without the label, or with any other value), by result (ok, error).
	Sweeps *prometheus.CounterVec
	// Strays is the number of such pods the last sweep found.
	Strays prometheus.Gauge
	// CachedPods is the number of pods the watcher holds (only those in
	// scope).
	CachedPods prometheus.Gauge
	// CapacityPods is what the watcher holds before it refuses (0: no
	// limit), in units of watch.CapacityHeapPerPod (512 B) of cached heap:
	// a typical pod counts once, a large one (many containers, long names)
	// several (watch.Packed.Units), so it is no count of pods to compare
	// with CachedPods.
	CapacityPods prometheus.Gauge
	// OverCapacity is 1 while the watcher refuses to run because the pods
	// it would serve, each counted by its size, exceed CapacityPods.
	OverCapacity prometheus.Gauge
	// Filtered counts evaluated pod states by filter reason (publish, unchanged, ...).
	Filtered *prometheus.CounterVec
	// Published counts events JetStream acknowledged as stored.
	Published prometheus.Counter
	// Deduplicated counts events JetStream acknowledged as duplicates.
	Deduplicated prometheus.Counter
	// PublishErrors by stage: encode, publish (not sent) or ack (sent, not confirmed).
	PublishErrors *prometheus.CounterVec
	// Retries counts pods re-queued after a publish error.
	Retries prometheus.Counter
	// InFlight is the number of publishes awaiting their ack.
	InFlight prometheus.Gauge
	// StreamRestores counts re-creations of a stream that had gone.
	StreamRestores prometheus.Counter
	// FinalSkipped counts pod states not published because their quit
	// failed for good and the pod has not changed since.
	FinalSkipped prometheus.Counter
	// Leader is 1 while this replica holds the Lease and watches, 0 while
	// it stands by (every replica exports it: their sum is 1 in a healthy
	// install).
	Leader prometheus.Gauge
	// LeaderTransitions counts the terms this replica began as the watcher.
	LeaderTransitions prometheus.Counter
}

// NewBridge registers the bridge metrics on reg (nil: not registered).
func NewBridge(reg prometheus.Registerer) *Bridge {
	m := &Bridge{
		WatchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_bridge_watch_events_total", Help: "Informer notifications by kind and op."}, []string{"kind", "op"}),
		PodsDecoded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_pods_decoded_total", Help: "Pod objects received from the API server and decoded, those outside the opt-in included (dropped before they are cached)."}),
		WatchedNamespaces: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_watched_namespaces", Help: "Namespaces whose pods are served (opted in), by scope."}, []string{"scope"}),
		StrayWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_stray_watches", Help: "Namespaces whose opted-in pods not labelled istio-aux.dev/watched=true are watched on their own."}),
		Sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_bridge_sweeps_total", Help: "Searches for opted-in pods not labelled istio-aux.dev/watched=true (selector istio-aux.dev/watched!=true), by result."}, []string{"result"}),
		Strays: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_strays", Help: "Opted-in pods not labelled istio-aux.dev/watched=true found by the last sweep."}),
		CachedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_cached_pods", Help: "Pods in scope the watcher holds."}),
		CapacityPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_capacity_pods", Help: "What the watcher holds within its memory limit before it refuses, in 512 B units of cached heap: a typical pod counts once, a large pod several (0: no limit)."}),
		OverCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_over_capacity", Help: "1 while the watcher refuses to run: the pods it would serve, each counted by its size, exceed its capacity."}),
		Filtered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_bridge_filtered_total", Help: "Pod states evaluated by the change filter, by result."}, []string{"reason"}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_published_total", Help: "Events stored by JetStream."}),
		Deduplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_deduplicated_total", Help: "Events JetStream dropped as duplicates of a recent id."}),
		PublishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_bridge_publish_errors_total", Help: "Events not published, by stage."}, []string{"stage"}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_publish_retries_total", Help: "Pods re-queued with back-off after a publish error."}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_publish_in_flight", Help: "Publishes awaiting their JetStream ack."}),
		StreamRestores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_stream_restores_total", Help: "Re-creations of the JetStream stream after it had gone."}),
		FinalSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_final_skipped_total", Help: "Pod states not published again: their quit failed for good and the pod has not changed."}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_bridge_leader", Help: "1 while this replica holds the Lease and watches pods, 0 while it stands by."}),
		LeaderTransitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_bridge_leader_transitions_total", Help: "Terms this replica began as the one that watches pods."}),
	}
	if reg != nil {
		reg.MustRegister(m.WatchEvents, m.PodsDecoded, m.WatchedNamespaces, m.StrayWatches, m.Sweeps, m.Strays, m.CachedPods, m.CapacityPods, m.OverCapacity, m.Filtered, m.Published, m.Deduplicated, m.PublishErrors, m.Retries, m.InFlight, m.StreamRestores,
			m.FinalSkipped, m.Leader, m.LeaderTransitions)
	}
	return m
}

// Dispatch counts what the dispatcher does.
type Dispatch struct {
	// Delivered by the sink's result class: 2xx, 4xx, 5xx or error (no response).
	Delivered *prometheus.CounterVec
	// Poison by reason (decode, rejected): terminated, never retried.
	Poison *prometheus.CounterVec
	// Redeliveries counts messages received more than once.
	Redeliveries prometheus.Counter
	// Exhausted counts messages that failed on their last allowed delivery.
	Exhausted prometheus.Counter
	// InFlight is the number of deliveries under way.
	InFlight prometheus.Gauge
	// Waiting is the number of events held for a free worker.
	Waiting prometheus.Gauge
	// Retries counts retries scheduled after a failed delivery.
	Retries prometheus.Counter
	// Final counts pod states recorded as failed for good (not published
	// again until the pod changes).
	Final prometheus.Counter
	// Duration of sink calls.
	Duration prometheus.Histogram
	// ConsumerRestores counts re-creations of a durable consumer that had gone.
	ConsumerRestores prometheus.Counter
	// Backlog is the durable consumer's count of events not yet settled:
	// stored and not yet delivered, or delivered and not yet acknowledged.
	// It is JetStream's count, the same whichever replica reads it, so
	// that an event that waits in the stream for a dispatcher is counted
	// too (Waiting and InFlight see only what this replica holds).
	Backlog prometheus.Gauge
}

// NewDispatch registers the dispatcher metrics on reg (nil: not registered).
func NewDispatch(reg prometheus.Registerer) *Dispatch {
	m := &Dispatch{
		Delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_delivered_total", Help: "Sink calls by result class."}, []string{"class"}),
		Poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_poison_total", Help: "Messages terminated as never deliverable, by reason."}, []string{"reason"}),
		Redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_redeliveries_total", Help: "Messages delivered more than once."}),
		Exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_exhausted_total", Help: "Messages that failed their last allowed delivery."}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_dispatch_in_flight", Help: "Deliveries under way."}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_dispatch_waiting", Help: "Events held for a free worker, in their namespace's line."}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_retries_total", Help: "Retries scheduled after a failed delivery."}),
		Final: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_final_total", Help: "Pod states recorded as failed for good, not published again until the pod changes."}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "istio_aux_dispatch_duration_seconds", Help: "Sink call duration.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}),
		ConsumerRestores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_consumer_restores_total", Help: "Re-creations of the durable consumer after it had gone."}),
		Backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: names.MetricDispatchBacklog, Help: "Events the durable consumer has not settled (not yet delivered, or awaiting their ack), as of this replica's last look."}),
	}
	if reg != nil {
		reg.MustRegister(m.Delivered, m.Poison, m.Redeliveries, m.Exhausted, m.InFlight, m.Duration, m.ConsumerRestores,
			m.Waiting, m.Retries, m.Final, m.Backlog)
	}
	return m
}

// Direct counts how the dispatcher reaches the function when it delivers
// straight to the Knative revision's pods (dispatch.DirectSink).
type Direct struct {
	// Path counts deliveries by the way they went: direct (to a ready pod
	// of the function) or sink (K_SINK, when no pod was ready or usable).
	Path *prometheus.CounterVec
	// Ejections counts pod addresses set aside after nothing answered
	// there (a dead node, most likely).
	Ejections prometheus.Counter
	// Endpoints is the number of ready pod addresses of the function the
	// dispatcher knows, those set aside included.
	Endpoints prometheus.Gauge
}

// NewDirect registers the direct delivery's metrics on reg (nil: not
// registered).
func NewDirect(reg prometheus.Registerer) *Direct {
	m := &Direct{
		Path: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_path_total", Help: "Deliveries by the way they reached the function: direct to a ready pod, or through K_SINK."}, []string{"path"}),
		Ejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_aux_dispatch_ejections_total", Help: "Function pod addresses set aside after nothing answered there."}),
		Endpoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_aux_dispatch_direct_endpoints", Help: "Ready pod addresses of the function the dispatcher can deliver to directly."}),
	}
	if reg != nil {
		reg.MustRegister(m.Path, m.Ejections, m.Endpoints)
	}
	return m
}
